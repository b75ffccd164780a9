"""``mem_fraction_static`` as SGLang 0.5.23 resolves it, and the context length the aiter cut reads.

1. Unset, SGLang estimates it (``arg_groups/memory_hook.py handle_gpu_memory_settings``), in MiB of GPU memory::

       reserved = 512 + max(chunked_prefill_size, 2048) x 1.5 + tp_size x pp_size / 8 x 1024
                  + reserve_for_graph_mb (decode graph: decode max_bs x 2; attention DP: max_bs x attn_dp x 3,
                    and x 1.5 more when max_bs > 300)
       reserved = max(reserved, 10 GiB) on GPUs over 60 GiB
       mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3)

   The decode graph's ``max_bs`` follows the GPU's memory and ``tp_size`` (capped by
   ``--max-running-requests``). Not counted, and said so: the prefill CUDA-graph term
   (``len(prefill bs) x 8`` MiB when that graph is on, at most about 0.5 GiB), the multimodal reduction, DeepEP
   and the post-capture sizing path.
2. Then, with ``attention_backend == "aiter"`` and a context over 8192 tokens, the fraction is cut to 0.85 of
   itself, a given one too (``arg_groups/attention_hook.py``; only ``SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION``
   keeps a given value, and the kit does not read that variable).
"""

from __future__ import annotations

from dataclasses import dataclass

from swa_kit.models.configs import ModelLayout, text_fields
from swa_kit.errors import UsageError
from swa_kit.launch.inputs import Launch
from swa_kit.launch.parallel import Parallel

_MEM = "sglang 0.5.23 arg_groups/memory_hook.py handle_gpu_memory_settings"
_CUT = "sglang 0.5.23 arg_groups/attention_hook.py (aiter, context_len > 8192)"
AITER_CUT, AITER_CUT_ABOVE = 0.85, 8192
#: ``get_context_length`` (utils/hf_transformers/common.py): the first of these keys the config has.
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                       "max_position_embeddings")
MIB = 1 << 20


@dataclass(frozen=True)
class Fraction:
    value: float
    how: str


def context_length(launch: Launch) -> int:
    """``model_config.context_len``: ``--context-length``, else the model's derived length."""
    if launch.server_args.context_length is not None:
        return launch.server_args.context_length
    return derived_context_length(launch.model)


def derived_context_length(model: ModelLayout) -> int:
    """``get_context_length`` (utils/hf_transformers/common.py): the text config's length times its rope factor."""
    text = text_fields(model)
    rope = text.get("rope_scaling") if isinstance(text.get("rope_scaling"), dict) else None
    factor = 1
    if rope and "original_max_position_embeddings" not in rope and rope.get("rope_type") != "llama3":
        factor = rope.get("factor", 1)
    for key in CONTEXT_LENGTH_KEYS:
        if isinstance(text.get(key), (int, float)) and not isinstance(text.get(key), bool):
            return int(factor * text[key])
    return 2048


def decode_graph_max_bs(gpu_mib: float, tp_size: int, max_running_requests: int | None) -> int:
    """``handle_gpu_memory_settings``: the decode CUDA graph's largest batch, by GPU memory and TP."""
    if gpu_mib < 20 * 1024:
        max_bs = 8
    elif gpu_mib < 35 * 1024:
        max_bs = 48 if tp_size < 4 else 160
    elif gpu_mib < 60 * 1024:
        max_bs = 32 if tp_size < 4 else 160
    elif gpu_mib < 160 * 1024:
        max_bs = 256 if tp_size < 4 else 512
    else:
        max_bs = 512
    return min(max_bs, max_running_requests) if max_running_requests is not None else max_bs


def estimated_fraction(gpu_bytes: int, chunked_prefill_size: int, parallel: Parallel,
                       max_running_requests: int | None = None) -> float:
    """SGLang's own ``mem_fraction_static`` when it is unset (the terms this module's docstring lists)."""
    gpu_mib = gpu_bytes / MIB
    max_bs = decode_graph_max_bs(gpu_mib, parallel.tp_size, max_running_requests)
    reserved = 512 + max(chunked_prefill_size, 2048) * 1.5 + parallel.tp_size * parallel.pp_size / 8 * 1024
    reserved += max_bs * 2
    if parallel.attn_dp_size > 1:
        reserved += max_bs * parallel.attn_dp_size * 3
        if max_bs > 300:
            reserved += max_bs * parallel.attn_dp_size * 1.5
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def resolve_fraction(launch: Launch, attention_backend: str, chunked_prefill_size: int,
                     parallel: Parallel) -> Fraction:
    """The fraction SGLang uses for ``launch`` on ``attention_backend``, and how it came about."""
    given = launch.server_args.mem_fraction_static
    memory = launch.platform.gpu_memory_bytes
    if given is not None:
        value, how = given, "--mem-fraction-static"
    elif memory is None:
        raise UsageError("SGLang estimates mem_fraction_static from the GPU's memory: give --gpu-memory-gib or "
                         "--mem-fraction-static")
    else:
        value = estimated_fraction(memory, chunked_prefill_size, parallel,
                                   launch.server_args.max_running_requests)
        how = (f"unset: SGLang's estimate ({_MEM}: activations for chunked prefill {chunked_prefill_size}, "
               "parallel slack, decode CUDA graph; prefill-graph reserve not counted)")
    context = context_length(launch)
    if attention_backend == "aiter" and context > AITER_CUT_ABOVE:
        value, how = value * AITER_CUT, f"{how}, x {AITER_CUT} by {_CUT}: context {context}"
    return Fraction(value, how)
