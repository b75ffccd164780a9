"""Time and peak memory of the block-level mask view at 131072 x 131072 (no dense mask).

    /work/venv/bin/python benchmarks/block_view.py [--len 131072] [--block 128]

Each case runs in a fresh subprocess, after ``import swa_kit.masks`` (which imports torch and
numpy), so the figures are the view's own cost, not the imports'. Two memory figures:

* ``rss peak +``: the process's resident-set high-water mark (``ru_maxrss``) after the call,
  minus the resident set just before it. It sees every allocation (numpy, torch, Python) and is
  an upper bound on the call's extra memory (if the imports peaked higher it reports that peak).
* ``traced peak``: tracemalloc's peak during a second call: numpy and Python allocations only,
  torch's allocator is invisible to it (the view uses numpy, so this is its working set).

The dense bool mask at that size would need q_len * kv_len bytes (17.2 GB at 128k).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc

LIMIT_S, LIMIT_MB = 2.0, 500.0

CASES = [
    ("prefill", "window 1024 (Gemma-3/4 sliding layer)", dict(window=1024)),
    ("prefill", "window 128 (GPT-OSS sliding layer)", dict(window=128)),
    ("prefill", "no window (full layer)", dict(window=None)),
    ("chunked", "chunk 8192 (Llama-4 local layer)", dict(window=None, chunk=8192)),
    ("extend", "window 1024, last 8192 of 131072", dict(window=1024, q_len=8192)),
]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def child(index: int, length: int, block: int) -> None:
    from swa_kit.masks import forward_mask

    mode, _, kwargs = CASES[index]
    kwargs = dict(kwargs)
    q_len = kwargs.pop("q_len", length)
    mask = forward_mask(mode, q_len, length, **kwargs)
    rss_before = _rss_mb()
    start = time.perf_counter()
    view = mask.block_view(block)
    seconds = time.perf_counter() - start
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    del view
    tracemalloc.start()
    view = mask.block_view(block)
    traced = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    print(json.dumps(dict(seconds=seconds, rss_delta_mb=rss_peak - rss_before, rss_peak_mb=rss_peak,
                          traced_mb=traced, summary=view.summary())))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--len", dest="length", type=int, default=131072, help="q_len = kv_len (default 131072)")
    parser.add_argument("--block", type=int, default=128, help="tile size (FlexAttention's default 128)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.length, args.block)
        return 0
    print(f"block view of {args.length} x {args.length}, {args.block} x {args.block} tiles; "
          f"dense bool mask would be {args.length ** 2 / 1e9:.1f} GB")
    print(f"{'case':48} {'time s':>7} {'rss peak + MB':>14} {'traced peak MB':>15} {'process peak MB':>16}")
    ok = True
    for index, (mode, label, _) in enumerate(CASES):
        out = subprocess.run([sys.executable, __file__, "--child", str(index), "--len", str(args.length),
                              "--block", str(args.block)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ok &= r["seconds"] < LIMIT_S and r["rss_delta_mb"] < LIMIT_MB
        print(f"{mode + ': ' + label:48} {r['seconds']:7.3f} {r['rss_delta_mb']:14.1f} {r['traced_mb']:15.1f} "
              f"{r['rss_peak_mb']:16.1f}")
        print(f"    {r['summary']}")
    print(f"{'PASS' if ok else 'FAIL'}: every case under {LIMIT_S} s and {LIMIT_MB:.0f} MB over the post-import RSS")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
