"""The kit kernel's launch policy: tile, warps, pipeline depth, register cap, split, and where a verify's edge goes.

:func:`launch_policy` gives a shape's :class:`LaunchPolicy`, a frozen dataclass; a tuning sweep overrides
fields through :func:`with_overrides` (checked, then :func:`dataclasses.replace`). :func:`plan_launch` turns a
policy and a batch's size into one :class:`KernelLaunch`: the split of the window, who merges, the pipeline
depth, the register cap and the edge tile's place, without touching a tensor. Each choice was measured on an
H200; docs/kernel.md gives the version that made it and its record.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from swa_kit.errors import UsageError

#: Most queries one request may bring: speculative decoding verifies 2-8 draft tokens per step.
MAX_QUERIES = 8

TILE_BYTES = 16 * 1024  # K (and V) bytes per tile and pipeline stage: 64 keys at head_dim 128 in bf16
TILE_BYTES_MANY_ROWS = 8 * 1024  # a query tile of more than 32 rows (a verify's drafts x the GQA group)
NUM_WARPS = 4
NUM_STAGES = 3
NUM_STAGES_NARROW = 2  # head_dim <= 64, except a 64-row verify at page size 1 (launch_policy)
PROGRAMS_PER_SM = 2  # the split aims at one wave of this many programs per SM (v10)
MIN_CHUNK = 256  # keys per split at least, except in a latency-bound batch (one tile there; v6)
# Two K/V tiles in flight per program where the grid leaves each SM at most two programs: the pipeliner puts a tile's
# table read a stage ahead of its K/V loads, so five stages buy a second K/V buffer (v10). Not on ROCm: never
# measured there, and an MI300's 64 KiB of LDS per workgroup would not hold a program's 70-78 KiB.
DEEP_STAGES = 5
DEEP_PROGRAMS_PER_SM = 2
# A verify's registers per thread, capped so that four programs of four warps fit an SM's 65,536 as decode's do (v5);
# only where its fp32 accumulator takes at most 32 registers a thread, the shapes the cap was measured on: a taller or
# wider tile spills under it, or ptxas refuses it. Decode and a two-buffer launch run uncapped.
MAX_REGISTERS = 128
CAPPED_ACCUMULATOR_REGISTERS = 32
# At most one (request, KV head) pair per this many SMs: the batch is latency-bound (B 1 at 8-16 KV heads on an
# H200), its window cut into one-tile chunks and merged by a second kernel, its programs side by side (v6).
LATENCY_BOUND_SMS_PER_PAIR = 8
# Up to this head_dim a verify's edge tile is loaded before the walk and folded in after it: its K and V fit in
# registers there; wider, they spill under the cap (v6).
EDGE_PREFETCH_MAX_HEAD_DIM = 64
INT32_OFFSETS_LIMIT = 2**31  # elements of a K or V buffer that 32-bit offsets can address
# Each score is scaled inside one fused multiply-add (v9), so the kernels ask for fusion by name: Triton 3.9 fuses by
# default and warns that from 3.10 on it will not.
FP_FUSION = True


class Edge(enum.IntEnum):
    """Where a chain verify's edge tile is folded in: the kernel's ``EDGE`` constexpr.

    Every draft attends the middle of the window; the ``q_len - 1`` keys on either side, which only some drafts see,
    make one extra tile of ``2 * MAX_QUERIES`` keys with a per-query mask."""

    NONE = 0  # decode: no edge
    BEFORE = 1  # split 0 loads it and folds it in before its walk
    PREFETCH = 2  # split 0 loads it before its walk and folds it in after, so its loads overlap the walk (v6)
    IN_WALK = 3  # split 0's walk takes it as its last iteration, pipelined like any tile (v11)
    OWN_SPLIT = 4  # a program of its own, the last split, beside the middle's chunks (v8)


class Merge(enum.IntEnum):
    """Who merges a split window's partial outputs: the kernel's ``MERGE`` constexpr."""

    NONE = 0  # one split: the kernel writes the output itself
    KERNEL = 1  # a second kernel, its programs side by side
    LAST_SPLIT = 2  # the last split of each (request, KV head) to finish: one launch fewer (v6)

    @property
    def label(self) -> str:
        return {Merge.NONE: "-", Merge.KERNEL: "merge kernel", Merge.LAST_SPLIT: "last split"}[self]


@dataclass(frozen=True)
class LaunchPolicy:
    """One shape's launch choices (:func:`launch_policy`). The switches are wishes that :func:`plan_launch` grants
    where the launch allows them (a second buffer where the grid is small, an edge program where the window splits)."""

    rows: int  # the query tile's rows: every (query, head) pair of one KV head, padded to a power of two >= 16
    block_n: int  # keys per tile
    num_warps: int
    num_stages: int  # pipeline stages with one K/V buffer
    max_registers: int  # CUDA's per-thread register cap; 0: none
    programs_per_sm: int  # the split's target
    whole_wave: bool  # never split into a second, partial wave
    min_chunk: int  # keys per split at least, where the window allows
    deep_pipeline: bool  # two K/V buffers where the grid is small (runs_deep)
    fused_merge: bool  # the last split merges (else a merge kernel)
    edge_prefetch: bool  # a verify's edge tile prefetched
    edge_split: bool  # a verify's edge tile in a program of its own, where the window is split anyway
    edge_in_walk: bool  # a verify's edge tile walked last, where the launch has two K/V buffers
    int32_offsets: bool  # K and V addressed with 32-bit offsets, where the buffers allow
    clamped_walk: bool  # the walk's tiles loaded unmasked, past the chunk's end its last key again (v13)


SWITCHES = tuple(f.name for f in dataclasses.fields(LaunchPolicy) if f.type == "bool")


def block_n_for(head_dim: int, itemsize: int = 2, rows: int = 16) -> int:
    """Keys per tile: a constant K tile in bytes per pipeline stage, at least 16 (tl.dot's minimum)."""
    tile = TILE_BYTES if rows <= 32 else TILE_BYTES_MANY_ROWS
    return max(16, tile // (head_dim * itemsize))


BLOCK_N = block_n_for(128)


def rows_for(max_q_len: int, group: int) -> int:
    """Rows of a program's query tile: every (query, head) pair of one KV head, padded to a power of two
    of at least 16 (tl.dot's smallest)."""
    return max(16, 1 << max(0, max_q_len * group - 1).bit_length())


def accumulator_registers(rows: int, head_dim: int, num_warps: int = NUM_WARPS) -> int:
    """Registers a thread holds for a program's fp32 output accumulator, ``rows`` x ``head_dim``."""
    return rows * head_dim // (32 * num_warps)


def is_latency_bound(pairs: int, num_sms: int) -> bool:
    """Whether a batch of ``pairs`` (request, KV head) pairs leaves most SMs idle, whatever its window."""
    return pairs * LATENCY_BOUND_SMS_PER_PAIR <= num_sms


def launch_policy(head_dim: int, group: int, max_q_len: int, itemsize: int = 2, latency_bound: bool = False,
                  page_size: int = 16) -> LaunchPolicy:
    """The policy for one shape; ``latency_bound``: the batch is too small to fill the GPU
    (:func:`is_latency_bound`)."""
    verify = max_q_len > 1
    rows = rows_for(max_q_len, group)
    block_n = block_n_for(head_dim, itemsize, rows)
    # At page size 1 each key's slot is a table read its K/V load waits on: a 64-row verify needs the third stage
    # to issue it a tile early (v6).
    narrow = head_dim <= 64 and not (rows > 32 and page_size == 1)
    deep = not latency_bound and torch.version.hip is None
    capped = verify and accumulator_registers(rows, head_dim) <= CAPPED_ACCUMULATOR_REGISTERS
    return LaunchPolicy(
        rows=rows, block_n=block_n, num_warps=NUM_WARPS, num_stages=NUM_STAGES_NARROW if narrow else NUM_STAGES,
        max_registers=MAX_REGISTERS if capped else 0, programs_per_sm=PROGRAMS_PER_SM, whole_wave=not latency_bound,
        min_chunk=block_n if latency_bound else MIN_CHUNK, deep_pipeline=deep, fused_merge=not latency_bound,
        edge_prefetch=verify and head_dim <= EDGE_PREFETCH_MAX_HEAD_DIM, edge_split=verify and latency_bound,
        edge_in_walk=verify and head_dim > EDGE_PREFETCH_MAX_HEAD_DIM and deep,
        # v12 and v13 for a verify only: in decode they moved registers across a program-per-SM step, both ways
        int32_offsets=verify, clamped_walk=verify,
    )


def with_overrides(policy: LaunchPolicy, overrides: Mapping[str, Any]) -> LaunchPolicy:
    """``policy`` with a tuning sweep's replacements (None: keep the policy's), refused where unknown or out of range.
    A switch takes a bool or 0/1; every other field an int (``max_registers=0``: no cap)."""
    known = {f.name for f in dataclasses.fields(LaunchPolicy)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise UsageError(f"unknown launch override(s) {unknown}; known: {sorted(known)}")
    given = {name: value for name, value in overrides.items() if value is not None}
    for name, value in given.items():
        if name in SWITCHES:
            if not isinstance(value, int) or value not in (0, 1):
                raise UsageError(f"launch override {name}={value!r}: give a bool or an int in 0..1 (or leave it out)")
            given[name] = bool(value)
        elif not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "max_registers" else 1):
            lowest = 0 if name == "max_registers" else 1
            raise UsageError(f"launch override {name}={value!r}: give an int >= {lowest} (or leave it out)")
    chosen = dataclasses.replace(policy, **given)
    if chosen.block_n < 16 or chosen.block_n & (chosen.block_n - 1):
        raise UsageError(f"block_n={chosen.block_n}: a key tile needs a power of two >= 16 (tl.dot's smallest)")
    if chosen.rows < policy.rows or chosen.rows & (chosen.rows - 1):
        raise UsageError(f"rows={chosen.rows}: the query tile needs a power of two >= {policy.rows}")
    return chosen


def choose_splits(pairs: int, window_tokens: int, num_sms: int, block_n: int = BLOCK_N,
                  programs_per_sm: int = PROGRAMS_PER_SM, min_chunk: int = MIN_CHUNK,
                  whole_wave: bool = False) -> tuple[int, int]:
    """``(splits, chunk)``: cut a window of ``window_tokens`` keys so the grid fills the GPU.

    ``pairs`` = requests x KV heads, one program each without splitting. About ``programs_per_sm``
    programs per SM, rounded up, or with ``whole_wave`` never more. Chunks are whole
    tiles of ``block_n`` keys, at least ``min_chunk`` keys where the window allows; the
    split count depends on the window, never the context.
    """
    tiles = max(1, math.ceil(window_tokens / block_n))
    per_pair = programs_per_sm * num_sms / max(pairs, 1)
    wanted = max(1, math.floor(per_pair) if whole_wave else math.ceil(per_pair))
    wanted = min(wanted, max(1, window_tokens // min_chunk))
    chunk = math.ceil(tiles / min(tiles, wanted)) * block_n
    return math.ceil(tiles * block_n / chunk), chunk


def split_window(policy: LaunchPolicy, pairs: int, window_tokens: int, num_sms: int,
                 splits: int | None = None) -> tuple[int, int, Merge]:
    """``(splits, chunk, merge)``: the policy's split of the window (:func:`choose_splits`) or ``splits`` forced, plus
    the edge program where the policy asks for one and the window is split, and who merges the partials."""
    if splits is None:
        splits, chunk = choose_splits(pairs, window_tokens, num_sms, policy.block_n, policy.programs_per_sm,
                                      policy.min_chunk, policy.whole_wave)
    elif not isinstance(splits, int) or isinstance(splits, bool) or splits < 1:
        raise UsageError(f"splits={splits!r}: give an int >= 1 (or None for the policy's choice)")
    else:
        chunk = math.ceil(math.ceil(window_tokens / policy.block_n) / splits) * policy.block_n
    if policy.edge_split and splits > 1:  # one program past the middle's chunks: its walk is empty
        splits += 1
    merge = Merge.NONE if splits == 1 else Merge.LAST_SPLIT if policy.fused_merge else Merge.KERNEL
    return splits, chunk, merge


def runs_deep(policy: LaunchPolicy, programs: int, chunk: int, num_sms: int) -> bool:
    """Whether a launch gets two K/V buffers (:data:`DEEP_STAGES`, uncapped registers): the policy allows it, the grid
    leaves each SM at most :data:`DEEP_PROGRAMS_PER_SM` programs, and a chunk has more than one tile to overlap."""
    return policy.deep_pipeline and programs <= DEEP_PROGRAMS_PER_SM * num_sms and chunk > policy.block_n


def place_edge(policy: LaunchPolicy, verify: bool, splits: int, deep: bool, overridden: Container[str] = ()) -> Edge:
    """Where a launch folds in a verify's edge tile. In the walk where the policy asks for it and the launch has two
    K/V buffers, unless another switch places the edge (``edge_in_walk`` among the ``overridden`` names: wherever
    the policy says); else in a program of its own where the policy asks and the window is split (``splits``
    counts that program); else prefetched or before the walk."""
    if not verify:
        return Edge.NONE
    if policy.edge_in_walk and ("edge_in_walk" in overridden
                                or (deep and not (policy.edge_prefetch or policy.edge_split))):
        return Edge.IN_WALK
    if policy.edge_split and splits > 1:
        return Edge.OWN_SPLIT
    return Edge.PREFETCH if policy.edge_prefetch else Edge.BEFORE


def addresses_in_int32(policy: LaunchPolicy, buffer_elements: int, overridden: Container[str] = ()) -> bool:
    """Whether a launch addresses K and V with 32-bit offsets: where the policy asks for them and the larger buffer
    reaches fewer than :data:`INT32_OFFSETS_LIMIT` elements. Asked for explicitly (``int32_offsets`` among the
    ``overridden`` names) on a buffer too large, refused by name: they would wrap."""
    fits = buffer_elements < INT32_OFFSETS_LIMIT
    if policy.int32_offsets and not fits and "int32_offsets" in overridden:
        raise UsageError(f"launch override int32_offsets=1: a K or V buffer whose offsets reach {buffer_elements} "
                         f"elements needs 64-bit ones (32-bit offsets reach fewer than {INT32_OFFSETS_LIMIT}); leave "
                         "it out")
    return policy.int32_offsets and fits


class KernelLaunch(NamedTuple):
    """How one batch launches under a policy (:func:`plan_launch`)."""

    splits: int  # programs per (request, KV head), an edge program included
    chunk: int  # window positions per split
    merge: Merge
    deep: bool  # two K/V buffers (runs_deep)
    num_stages: int
    max_registers: int  # 0: no cap
    edge: Edge
    int32_offsets: bool


def plan_launch(policy: LaunchPolicy, pairs: int, window_tokens: int, num_sms: int, *, verify: bool,
                splits: int | None = None, overridden: Container[str] = (), buffer_elements: int = 0) -> KernelLaunch:
    """The launch of ``policy`` for ``pairs`` (request, KV head) pairs over a window of ``window_tokens`` keys on
    ``num_sms`` SMs, without any tensor. ``verify``: more than one query in some request; ``overridden``: the
    policy's fields the caller gave explicitly (an explicit ``num_stages``, ``max_registers`` or ``edge_in_walk`` is
    taken as given); ``buffer_elements``: how far the larger K/V buffer's offsets reach (:func:`addresses_in_int32`)."""
    if "edge_in_walk" in overridden and policy.edge_in_walk and (policy.edge_prefetch or policy.edge_split):
        raise UsageError("launch override edge_in_walk=1 places the edge tile itself: give edge_prefetch=0 and "
                         "edge_split=0 with it")
    for switch in ("edge_split", "edge_in_walk"):  # edge_split would launch a program with nothing to do
        if getattr(policy, switch) and not verify:
            raise UsageError(f"launch override {switch}=1 applies to a verify (max_q_len > 1): a decode batch has no "
                             "edge tile; leave it out")
    n_splits, chunk, merge = split_window(policy, pairs, window_tokens, num_sms, splits)
    deep = runs_deep(policy, pairs * n_splits, chunk, num_sms)
    return KernelLaunch(n_splits, chunk, merge, deep,
                        policy.num_stages if "num_stages" in overridden or not deep else DEEP_STAGES,
                        policy.max_registers if "max_registers" in overridden or not deep else 0,
                        place_edge(policy, verify, n_splits, deep, overridden),
                        addresses_in_int32(policy, buffer_elements, overridden))


def kernel_constexprs(policy: LaunchPolicy, launch: KernelLaunch, *, group: int, head_dim: int, page_size: int,
                      sinks: bool) -> dict[str, Any]:
    """The attend kernel's compile-time arguments: what a plan launches with, and what
    ``benchmarks/kernel_resources.py`` compiles (one list, so the two cannot drift apart)."""
    fused = launch.merge == Merge.LAST_SPLIT
    return {"GROUP": group, "ROWS": policy.rows, "HEAD_DIM": head_dim, "PAGE": page_size, "BLOCK_N": policy.block_n,
            "MERGE": int(launch.merge), "EDGE": int(launch.edge), "EDGE_KEYS": MAX_QUERIES, "USE_SINKS": sinks,
            "INT32_OFFSETS": launch.int32_offsets, "CLAMPED_WALK": policy.clamped_walk,
            "MERGE_SPLITS": 1 << (launch.splits - 1).bit_length() if fused else 1}
