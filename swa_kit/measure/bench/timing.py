"""Timing on a GPU: kernel time by CUDA-graph replay with L2 flushed, cross-checked by profiler kernel time.

Why not ``triton.testing.do_bench``: it launches the callable from Python on every repeat,
and its CUDA events then also count the launch path; a kernel of 130 us read 8-12 us slower
through it. Here each path is captured once in a CUDA graph and the graph is replayed; before
every replay a separate buffer of :data:`FLUSH_BYTES` (several times the L2) is read through, so
no replay finds the previous one's K/V in L2, and the flush is outside the two events. The
median over the replays is the row's time. :func:`profiler_kernel_us` sums the device time
of the path's own kernels (the flush excluded), per repeat, from the PyTorch profiler: a second
method that sees no launch gaps at all. A path that cannot be captured (a host sync inside it,
say) falls back to the profiler method, and every row says which method timed it.

The flush reads rather than writes. Zeroing the buffer (what ``do_bench`` does, and this kit did
until its v8 run) leaves the whole L2 dirty, and the timed kernel's first misses must write those
lines back to DRAM. On an H200 that added 5-12 us to the kit's kernel wherever it read 64 MiB or
more, and 2-5 us to a copy of the same bytes (``records/tuning/h200_2026-12-01_ab_flush.json``):
a cost of the flush, not of the path, and not the same for every path. A read leaves clean lines
that a miss simply drops, as Nsight Compute's own cache flush does.
"""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable
from typing import Any

import torch

FLUSH_BYTES = 512 * 2**20  # several times the H200's 60 MB L2
GRAPH = "cuda_graph_replay_l2_flushed"
PROFILER = "profiler_kernel_sum_l2_flushed"


def gpu_available() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "no CUDA/ROCm GPU visible to torch"
    try:
        import triton  # noqa: F401
    except ImportError:
        return False, "Triton is not installed"
    return True, torch.cuda.get_device_name()


class L2Flush:
    """Streaming a buffer of its own through L2 evicts whatever the timed path left there.

    ``by="read"`` (the default) sums the buffer, leaving clean lines; ``by="write"`` zeroes it, leaving dirty
    lines that the timed kernel pays to write back (how runs before v8 were timed, kept to reproduce them).
    """

    def __init__(self, device: torch.device, nbytes: int = FLUSH_BYTES, by: str = "read") -> None:
        if by not in ("read", "write"):
            raise ValueError(f"by={by!r}: flush L2 by 'read' (clean lines) or 'write' (dirty lines)")
        if nbytes < 4 or nbytes % 4:
            raise ValueError(f"nbytes={nbytes}: give a positive multiple of 4 (the buffer holds float32 values)")
        self.by = by
        self.buffer = torch.zeros(nbytes // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        if self.by == "read":
            self.buffer.sum()
        else:
            self.buffer.zero_()


def _warm(fn: Callable[[], Any], times: int = 3) -> None:
    """Run on a side stream first, as graph capture requires (compiles, allocator, library handles)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(times):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def graph_replay_us(fn: Callable[[], Any], flush: L2Flush, reps: int = 50) -> dict[str, float]:
    """Median microseconds of one replay of ``fn``'s CUDA graph, L2 flushed before each replay."""
    _warm(fn)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends, strict=True):
        flush()
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True))
    del graph
    return {"us": statistics.median(times), "p10_us": times[len(times) // 10], "p90_us": times[-1 - len(times) // 10]}


def profiler_kernel_us(fn: Callable[[], Any], flush: L2Flush, reps: int = 20) -> dict[str, float]:
    """Median over repeats of the summed device time of ``fn``'s kernels (the flush's own excluded)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    def device_events(prof: Any) -> list[Any]:
        return sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)

    _warm(fn)
    with profile(activities=[ProfilerActivity.CUDA]) as alone:
        flush()
        torch.cuda.synchronize()
    flush_names = {e.name for e in device_events(alone)}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush()
            fn()
        torch.cuda.synchronize()
    sums: list[float] = []
    for event in device_events(prof):
        if event.name in flush_names:
            sums.append(0.0)
        elif sums:
            sums[-1] += event.time_range.elapsed_us()
    if len(sums) != reps:
        raise RuntimeError(f"profiler saw {len(sums)} flushes for {reps} repeats")
    sums.sort()
    return {"us": statistics.median(sums), "p10_us": sums[reps // 10], "p90_us": sums[-1 - reps // 10]}


def measure(fn: Callable[[], Any], flush: L2Flush, reps: int = 50) -> dict[str, Any]:
    """Time ``fn`` by graph replay, or by the profiler where it cannot be captured; the result names its method."""
    try:
        return {"method": GRAPH, **graph_replay_us(fn, flush, reps)}
    except Exception as exc:  # capture refuses host syncs and some library calls: fall back, say why
        torch.cuda.synchronize()
        note = f"graph capture failed ({type(exc).__name__}: {str(exc)[:160]})"
        return {"method": PROFILER, "note": note, **profiler_kernel_us(fn, flush, max(10, reps // 2))}


def copy_bandwidth(device: torch.device, flush: L2Flush, moved_bytes: int = 4 * 2**30) -> dict[str, Any]:
    """Device-to-device copy bandwidth (bytes read plus bytes written), timed like every path.

    Two copies of ``moved_bytes / 2`` bytes, and the faster counts: ``copy_`` (a memcpy, which
    inside a CUDA graph may run on a copy engine rather than the multiprocessors) and an
    elementwise kernel that reads and writes the same bytes (``torch.neg(out=)``), the way an
    attention kernel moves them. At 4 GiB it is the ceiling; at a kernel's own byte count it is
    what one call moving those bytes can reach at all.
    """
    if moved_bytes < 4 or moved_bytes % 4:
        raise ValueError(f"moved_bytes={moved_bytes}: give a positive multiple of 4 (bf16 read + written)")
    n = moved_bytes // 4  # bf16 elements of the source: half the bytes read, half written
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    nbytes = 2 * n * src.element_size()
    ways = {"memcpy": measure(lambda: dst.copy_(src), flush),
            "sm_kernel": measure(lambda: torch.neg(src, out=dst), flush)}
    best = min(ways, key=lambda name: ways[name]["us"])
    return {"tbs": nbytes / (ways[best]["us"] * 1e-6) / 1e12, "bytes": nbytes, "by": best,
            **ways[best], "ways": {name: {"tbs": nbytes / (w["us"] * 1e-6) / 1e12, **w} for name, w in ways.items()}}


def read_bandwidth(device: torch.device, flush: L2Flush, nbytes: int) -> dict[str, Any]:
    """One kernel that reads ``nbytes`` and writes next to nothing (a sum of bf16 values), timed like every path.

    Attention over a KV cache is such a reader, and for it this is the fairer reference at a given size than a
    copy of the same bytes: up to an L2's worth of a copy's writes is still in L2 when its timer stops, so
    below a few GiB a copy's time counts bytes that have not reached DRAM yet. A reference, not a bound: a
    reader with more bytes in flight can pass it (the kit's v10 kernel did, at 256 MiB).
    """
    if nbytes < 2 or nbytes % 2:
        raise ValueError(f"nbytes={nbytes}: give a positive multiple of 2 (bf16 values to read)")
    src = torch.randn(nbytes // 2, device=device, dtype=torch.bfloat16)
    timed = measure(lambda: src.sum(dtype=torch.float32), flush)
    return {"tbs": nbytes / (timed["us"] * 1e-6) / 1e12, "bytes": nbytes, **timed}


def launch_floor(device: torch.device, flush: L2Flush) -> dict[str, Any]:
    """The time of one graph replay of a one-element kernel: what any path pays at least."""
    x = torch.zeros(1, device=device)
    return measure(lambda: x.add_(1.0), flush)


def versions() -> dict[str, Any]:
    import importlib.metadata as md

    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}
    for dist in ("triton", "amd-aiter", "swa_kit"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def machine(device: torch.device) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(device)
    return {"gpu": props.name, "sms": props.multi_processor_count, "memory_gib": round(props.total_memory / 2**30, 1),
            "capability": f"{props.major}.{props.minor}", "l2_mib": round(getattr(props, "L2_cache_size", 0) / 2**20),
            "host": platform.node(), "platform": platform.platform()}
