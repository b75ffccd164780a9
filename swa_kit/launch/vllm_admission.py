"""What vLLM 0.34 charges a request at admission, per KV-cache group, and the longest prompt the pool admits.

Mirrors ``KVCacheManager.allocate_slots(..., full_sequence_must_fit=True)`` (vllm/v1/core/kv_cache_manager.py;
``SchedulerConfig.scheduler_reserve_full_isl`` defaults to True): before a waiting request's first chunk runs, the
whole prompt (``min(num_tokens, max_model_len)``) must fit in the free blocks of the one pool, summed over the
groups' ``SingleTypeKVCacheManager.get_num_blocks_to_allocate(..., apply_admission_cap=True)``:

* a group charges ``cdiv(tokens, block_size)`` blocks of its own block size;
* a ``SlidingWindowSpec`` or ``ChunkedLocalAttentionSpec`` group is capped at the spec's
  ``max_admission_blocks_per_request`` (vllm/v1/kv_cache_interface.py), which ``get_manager_for_kv_cache_spec``
  hands its manager: ``cdiv(min(W - 1 + extra_retained_tokens + max_in_flight_tokens, max_model_len), block) + 1``
  for a window, ``cdiv(min(chunk + max_in_flight_tokens, max_model_len), block)`` for chunks. A group of
  ``UniformTypeKVCacheSpecs`` gets no cap (the manager factory tests the spec's class).
* ``max_in_flight_tokens`` is ``VllmConfig.max_in_flight_tokens``: concurrent batches (pipeline stages, plus one
  with async scheduling, on by default) x ``max_num_batched_tokens``.

The start-up check (``_check_enough_kv_cache_memory`` on ``_max_memory_usage_bytes_from_groups``, vllm/v1/core/
kv_cache_planning.py) charges one ``max_model_len`` request the same per-group blocks (``max_memory_usage_bytes`` is
``max_admission_blocks_per_request`` pages: "single source of truth for both startup pool sizing and the runtime
admission gate", vLLM PR #40946), so a launch that starts admits every prompt up to ``max_model_len``. ``before-55800``
(:mod:`swa_kit.vllm_versions`) undoes that for the drafter's groups, as vLLM #55800 shows it: start-up sizes the
drafter's sliding group for its window, admission still charges it the prompt (up to the window plus the in-flight
tokens), so the engine starts and a long request waits in the queue until it times out. A cold admission is
modelled: an empty pool, no prefix-cache hit, no watermark (it applies only while other requests run).
"""

from __future__ import annotations

from dataclasses import dataclass

from swa_kit.launch.vllm_kv_cache import Group
from swa_kit.vllm_versions import has_fix

#: ``EngineArgs.get_batch_defaults`` for ``vllm serve`` (UsageContext.OPENAI_API_SERVER): GPU memory in GiB at
#: least this -> the default ``max_num_batched_tokens`` (ROCm has no tier of its own).
BATCH_DEFAULTS = ((160, 16384), (70, 8192), (0, 2048))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def default_max_num_batched_tokens(gpu_memory_gib: float) -> int:
    """``get_batch_defaults``: 16384 from 160 GiB, 8192 from 70 GiB (not an A100), else 2048."""
    return next(tokens for floor, tokens in BATCH_DEFAULTS if gpu_memory_gib >= floor)


@dataclass(frozen=True)
class GroupCharge:
    """What one KV-cache group charges a request at admission."""

    group: int
    kind: str
    block_size: int
    cap: int | None  # max_admission_blocks_per_request; None: uncapped
    blocks: int  # blocks charged for the prompt
    drafter: bool  # the group holds drafter layers that own KV (not Gemma-4's aliases)

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size


def admission_cap(group: Group, max_in_flight_tokens: int, max_model_len: int, extra_retained: int = 0) -> int | None:
    """The spec's ``max_admission_blocks_per_request`` for a local group (None for a full or uniform-type one)."""
    spec = group.specs[0]
    if group.kind == "SlidingWindowSpec":
        assert spec.sliding_window is not None
        tokens = min(spec.sliding_window - 1 + extra_retained + max_in_flight_tokens, max_model_len)
        return cdiv(tokens, spec.block_size) + 1
    if group.kind == "ChunkedLocalAttentionSpec":
        assert spec.attention_chunk_size is not None
        return cdiv(min(spec.attention_chunk_size + max_in_flight_tokens, max_model_len), spec.block_size)
    return None


@dataclass(frozen=True)
class Admission:
    """A request of ``prompt_tokens`` at admission, and the longest prompt an empty pool admits."""

    prompt_tokens: int
    max_model_len: int
    max_in_flight_tokens: int
    pool_blocks: int
    groups: tuple[Group, ...]
    drafter_groups: frozenset[int]
    sized_for_window: frozenset[int] = frozenset()  # groups start-up sizes for the window alone (before-55800)

    def charges(self, tokens: int) -> tuple[GroupCharge, ...]:
        """Each group's ``get_num_blocks_to_allocate`` for a cold request of ``tokens``."""
        tokens = min(tokens, self.max_model_len)
        out = []
        for g, group in enumerate(self.groups):
            cap = admission_cap(group, self.max_in_flight_tokens, self.max_model_len)
            size = group.specs[0].block_size
            blocks = cdiv(tokens, size) if cap is None else min(cdiv(tokens, size), cap)
            out.append(GroupCharge(g, group.kind, size, cap, blocks, g in self.drafter_groups))
        return tuple(out)

    def blocks(self, tokens: int) -> int:
        return sum(c.blocks for c in self.charges(tokens))

    @property
    def startup_blocks(self) -> int:
        """What the start-up check charges one ``max_model_len`` request, in pool blocks."""
        total = 0
        for c in self.charges(self.max_model_len):
            window = admission_cap(self.groups[c.group], 0, self.max_model_len)
            total += min(c.blocks, window) if c.group in self.sized_for_window and window is not None else c.blocks
        return total

    @property
    def starts(self) -> bool:
        """Whether the start-up check passes (else vLLM refuses to start at this max_model_len)."""
        return self.startup_blocks <= self.pool_blocks

    @property
    def prompt_charges(self) -> tuple[GroupCharge, ...]:
        return self.charges(self.prompt_tokens)

    @property
    def admitted(self) -> bool:
        return self.blocks(self.prompt_tokens) <= self.pool_blocks

    @property
    def largest_prompt(self) -> int:
        """The longest prompt (at most ``max_model_len``) whose charge fits the pool; 0 when none does."""
        low, high = 0, self.max_model_len  # charges never fall as the prompt grows
        while low < high:
            mid = (low + high + 1) // 2
            if self.blocks(mid) <= self.pool_blocks:
                low = mid
            else:
                high = mid - 1
        return low


def admission(groups: tuple[Group, ...], pool_blocks: int, prompt_tokens: int, max_model_len: int,
              max_in_flight_tokens: int, drafter_groups: frozenset[int], version: str) -> Admission:
    """The admission gate at vLLM ``version`` (``before-55800``: start-up sizes the drafter's groups for the window)."""
    window_sized = frozenset() if has_fix(version, 55800) else drafter_groups
    return Admission(prompt_tokens, max_model_len, max_in_flight_tokens, pool_blocks, groups, drafter_groups,
                     window_sized)
