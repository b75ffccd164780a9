"""Full and SWA pool sizes as SGLang 0.5.23's pool configurators compute them at start-up.

Mirrors ``model_executor/pool_configurator.py``:

* ``HybridSWAPoolConfigurator`` (the default for a hybrid model): bytes per full-pool token =
  ``full_cell + swa_full_tokens_ratio x swa_cell``; full tokens = budget // that, page-aligned; SWA
  tokens = full tokens x ratio, page-aligned. The ratio falls back to 0.8
  (``arg_groups/fields/schedule.py``, ``fallback=0.8``).
* ``SWARequestCapPoolConfigurator`` when ``--max-running-requests`` is set, the radix cache is off and
  chunked prefill is on: the SWA pool is the worst case of the running requests
  (``compute_swa_request_cap``), the rest of the budget goes to the full pool.
* ``DefaultPoolConfigurator`` (one pool): every layer for every token.
* ``validate_swa_pool_size``: start-up fails when ``sliding_window_size + page_size >= swa_tokens``.

The budget is ``GPU memory x mem_fraction_static - weights`` (``--max-total-tokens`` instead caps the
full pool directly). Unset, ``mem_fraction_static`` is SGLang's own estimate, which reserves at least
10 GiB on GPUs over 60 GiB (``arg_groups/memory_hook.py``); the kit uses that floor and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from swa_kit.models.configs import DTYPE_BYTES, ModelLayout
from swa_kit.engine.environment import env_value
from swa_kit.launch.inputs import GIB, Launch
from swa_kit.errors import UsageError

RATIO_FALLBACK = 0.8
_PC = "sglang 0.5.23 model_executor/pool_configurator.py"
_KV_DTYPE_BYTES = {"fp8_e4m3": 1, "fp8_e5m2": 1, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


@dataclass(frozen=True)
class PoolSizes:
    """What the configurator decides, with the cells it used and how the budget was found."""

    configurator: str  # SGLang's class name, e.g. HybridSWAPoolConfigurator
    source: str  # the file and class it mirrors, and why it applies
    hybrid: bool
    ratio: float | None
    full_cell_bytes: int  # one token in every full-attention layer (all layers without a hybrid pool)
    swa_cell_bytes: int  # one token in every sliding / chunked layer (0 without a hybrid pool)
    budget_bytes: int | None
    budget_how: str
    full_tokens: int | None
    swa_tokens: int | None
    floor_tokens: int | None  # validate_swa_pool_size refuses swa_tokens <= this
    refused: str | None  # the start-up error SGLang raises, or None

    @property
    def full_bytes(self) -> int | None:
        return None if self.full_tokens is None else self.full_tokens * self.full_cell_bytes

    @property
    def swa_bytes(self) -> int | None:
        return None if self.swa_tokens is None else self.swa_tokens * self.swa_cell_bytes

    @property
    def one_pool_cell_bytes(self) -> int:
        return self.full_cell_bytes + self.swa_cell_bytes

    @property
    def bytes_per_context_token(self) -> float | None:
        """KV bytes the pools spend per token of full-pool capacity (the unit the ratio is set in).

        None for a request-capped SWA pool beside a full pool of unknown size (no KV budget, no --max-total-tokens).
        """
        if not self.hybrid:
            return float(self.full_cell_bytes)
        if self.ratio is not None:  # the configurator's own cell: full + ratio x SWA (before page rounding)
            return self.full_cell_bytes + self.ratio * self.swa_cell_bytes
        full, swa = self.full_bytes, self.swa_bytes
        if full is None or swa is None or not self.full_tokens:
            return None
        return (full + swa) / self.full_tokens

    @property
    def saved_fraction_vs_one_pool(self) -> float | None:
        """Share of KV bytes per token of context the hybrid pool saves against one pool of every layer."""
        per_token = self.bytes_per_context_token
        return None if per_token is None else 1 - per_token / self.one_pool_cell_bytes


def kv_dtype_bytes(model: ModelLayout, kv_cache_dtype: str) -> int:
    if kv_cache_dtype == "auto":
        return DTYPE_BYTES[model.dtype]
    if kv_cache_dtype not in _KV_DTYPE_BYTES:
        raise UsageError(f"--kv-cache-dtype {kv_cache_dtype!r}: the kit sizes auto, {', '.join(_KV_DTYPE_BYTES)}")
    return _KV_DTYPE_BYTES[kv_cache_dtype]


def _cell(model: ModelLayout, layer_ids: list[int], dtype_bytes: int) -> int:
    kinds = [model.layer_kind(i) for i in layer_ids]
    return sum(k.num_kv_heads * (k.head_dim + k.v_head_dim) * dtype_bytes for k in kinds)


def default_chunked_prefill_size(gpu_memory_bytes: int | None) -> int:
    """SGLang's GPU-memory-dependent default (``arg_groups/memory_hook.py``)."""
    mib = (gpu_memory_bytes or 0) / (1 << 20)
    for limit, size in ((20 * 1024, 2048), (60 * 1024, 4096), (160 * 1024, 8192)):
        if mib < limit:
            return size
    return 16384


def _budget(launch: Launch) -> tuple[int | None, str]:
    memory = launch.platform.gpu_memory_bytes
    if memory is None:
        return None, "no GPU memory (platform cpu): give --gpu-memory-gib for pool sizes"
    fraction = launch.server_args.mem_fraction_static
    how = "--mem-fraction-static"
    if fraction is None:
        fraction = round((memory - 10 * GIB) / memory, 3)
        how = ("mem_fraction_static unset: SGLang's estimate reserves >= 10 GiB (memory_hook.py); the kit uses that "
               "floor")
    weights = launch.weights_bytes
    weights_how = "minus --weights-gib" if weights is not None else "weights NOT subtracted (give --weights-gib)"
    assumed = " (assumed for the platform)" if launch.platform.memory_assumed else ""
    budget = int(memory * fraction) - (weights or 0)
    text = (f"{memory / GIB:.1f} GiB GPU memory{assumed} x {fraction} ({how}) {weights_how} "
            f"= {budget / GIB:.1f} GiB")
    if budget <= 0:
        raise UsageError(f"the KV budget is {budget / GIB:.1f} GiB ({text}): lower --weights-gib or raise "
                         "--mem-fraction-static")
    return budget, text


def swa_request_cap(launch: Launch, sws: int, page_size: int, chunked_prefill_size: int) -> int:
    """``compute_swa_request_cap``: worst-case SWA slots the scheduler holds at max_running_requests."""
    args = launch.server_args
    if args.max_running_requests is None:
        raise UsageError("the SWA request cap counts running requests: give --max-running-requests")
    draft_tokens = args.speculative_num_draft_tokens or 1
    interval = max(1, int(env_value(launch.env, "SGLANG_SWA_EVICTION_INTERVAL")))
    trailing = sws + interval * draft_tokens + page_size
    if args.speculative_algorithm is None:
        decode_alloc = page_size
    else:  # spec-v2 overlap keeps 2 x the per-decode allocation outstanding (allocation_sizing.py)
        steps, topk = args.speculative_num_steps or 1, args.speculative_eagle_topk or 1
        decode_alloc = 2 * max(steps * topk, draft_tokens)
    chunks = 1 if args.disable_overlap_schedule else 2
    return (trailing + decode_alloc) * args.max_running_requests + chunks * chunked_prefill_size + page_size


def _align(tokens: int, page_size: int) -> int:
    return tokens // page_size * page_size


def size_pools(launch: Launch, hybrid: bool, page_size: int) -> PoolSizes:
    """The pools SGLang sizes at start-up for ``launch`` (hybrid or one pool)."""
    model, args = launch.model, launch.server_args
    dtype_bytes = kv_dtype_bytes(model, args.kv_cache_dtype)
    budget, how = _budget(launch)
    if args.max_total_tokens is not None:
        how = f"--max-total-tokens {args.max_total_tokens} caps the full pool"
    if not hybrid:
        cell = _cell(model, list(range(model.num_layers)), dtype_bytes)
        tokens = args.max_total_tokens or (budget // cell if budget else None)
        tokens = _align(tokens, page_size) if tokens else None
        name = "DefaultPoolConfigurator"
        return PoolSizes(name, f"{_PC} {name}", False, None, cell, 0, budget, how, tokens, None, None, None)
    full_cell = _cell(model, model.full_attention_layer_ids, dtype_bytes)
    swa_cell = _cell(model, model.swa_attention_layer_ids, dtype_bytes)
    sws = model.sliding_window_size
    if sws is None:  # chunked layers only: SGLang sizes the SWA pool with the chunk (resolve_sliding_window_size)
        sws = max(k.chunk_size for k in model.kinds.values() if k.chunk_size)
    chunked = args.chunked_prefill_size or default_chunked_prefill_size(launch.platform.gpu_memory_bytes)
    cap_mode = args.max_running_requests is not None and args.disable_radix_cache and chunked > 0 \
        and bool(model.full_attention_layer_ids)
    ratio = args.swa_full_tokens_ratio or RATIO_FALLBACK
    swa: int | None
    if cap_mode:
        swa = -(-swa_request_cap(launch, sws, page_size, chunked) // page_size) * page_size
        full = args.max_total_tokens or ((budget - swa * swa_cell) // full_cell if budget else None)
        full = _align(full, page_size) if full else None
        name = "SWARequestCapPoolConfigurator"
        source = f"{_PC} {name} (--max-running-requests with the radix cache off)"
        return PoolSizes(name, source, True, None, full_cell, swa_cell, budget, how, full, swa, None, None)
    full = args.max_total_tokens or (int(budget // (full_cell + ratio * swa_cell)) if budget else None)
    full = _align(full, page_size) if full else None
    swa = _align(int(full * ratio), page_size) if full else None
    refused = None
    if swa is not None and sws + page_size >= swa:
        refused = (f"SWA pool ({swa} tokens) cannot hold even one request: the prefill admission floor is "
                   f"sliding_window_size ({sws}) + page_size ({page_size}) (validate_swa_pool_size)")
    ratio_how = "--swa-full-tokens-ratio" if args.swa_full_tokens_ratio else "unset: SGLang's fallback in " \
                                                                             "arg_groups/fields/schedule.py"
    name = "HybridSWAPoolConfigurator"
    return PoolSizes(name, f"{_PC} {name}, swa_full_tokens_ratio {ratio} ({ratio_how})", True, ratio, full_cell,
                     swa_cell, budget, how, full, swa, sws + page_size, refused)
