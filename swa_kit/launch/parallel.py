"""What one GPU holds under tensor, pipeline and data parallelism, as SGLang 0.5.23 lays a launch out.

* ``--dp-size N --enable-dp-attention`` is the deprecated spelling of ``--attn-dp-size N``
  (``arg_groups/parallel_hook.py handle_deprecated_dp_attention``: ``attn_dp_size = dp_size``, ``dp_size = 1``);
  without it ``dp_size`` counts whole replicas, each of ``tp_size x pp_size`` GPUs.
* The attention TP width is ``tp_size // attn_dp_size`` (``runtime_context.py derive_attn_tp_size``): each GPU
  keeps ``max(1, kv_heads // attn_tp_size)`` KV heads (``configs/model_config.py ModelConfig.get_num_kv_heads``,
  ``get_swa_num_kv_heads``), so with fewer KV heads than ranks every GPU keeps one (replicated).
* Pipeline stages split the layers evenly, the last ``num_layers % pp_size`` stages taking one more
  (``distributed/utils.py get_pp_indices``); each stage sizes a pool for its own layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from swa_kit.errors import UsageError
from swa_kit.launch.inputs import ServerArgsView
from swa_kit.sglang_versions import SGLANG_VERSION

_SRC = f"sglang {SGLANG_VERSION} runtime_context.py derive_attn_tp_size, arg_groups/parallel_hook.py"


@dataclass(frozen=True)
class Parallel:
    """The parallel layout of one launch, resolved as SGLang resolves it."""

    tp_size: int
    pp_size: int
    dp_size: int  # whole replicas
    attn_dp_size: int  # attention-DP groups inside one TP group

    @property
    def attn_tp_size(self) -> int:
        return self.tp_size // self.attn_dp_size

    @property
    def gpus(self) -> int:
        return self.tp_size * self.pp_size * self.dp_size

    def kv_heads_per_gpu(self, total_kv_heads: int) -> int:
        """``ModelConfig.get_num_kv_heads(attn_tp_size)``: heads split over the attention-TP ranks, at least one."""
        return max(1, total_kv_heads // self.attn_tp_size)

    def stage_layers(self, num_layers: int) -> list[range]:
        """``get_pp_indices`` for each PP rank: an even split, the last ``num_layers % pp`` stages one layer more."""
        base, extra = divmod(num_layers, self.pp_size)
        stages, start = [], 0
        for rank in range(self.pp_size):
            size = base + (1 if rank >= self.pp_size - extra else 0)
            stages.append(range(start, start + size))
            start += size
        return stages

    def describe(self) -> str:
        text = f"tp {self.tp_size}, pp {self.pp_size}, dp {self.dp_size}"
        if self.attn_dp_size > 1:
            text += f", attention DP {self.attn_dp_size} (attention TP {self.attn_tp_size})"
        return f"{text}: {self.gpus} GPU{'s' if self.gpus > 1 else ''} ({_SRC})"


def parallel_of(args: ServerArgsView) -> Parallel:
    """The layout SGLang resolves from ``--tp-size``, ``--pp-size``, ``--dp-size``, ``--enable-dp-attention``."""
    attn_dp, dp = args.attn_dp_size, args.dp_size
    if args.enable_dp_attention and attn_dp == 1:  # handle_deprecated_dp_attention
        attn_dp, dp = args.dp_size, 1
    if args.tp_size % attn_dp:
        raise UsageError(f"--tp-size {args.tp_size} with attention DP {attn_dp}: the attention-DP groups split the TP "
                         "group, so tp_size must be a multiple of it (runtime_context.py derive_attn_tp_size)")
    return Parallel(args.tp_size, args.pp_size, dp, attn_dp)
