"""How the kit's FlexAttention path runs requests of different lengths: compiled, or eagerly past dynamo's recompile
limit, with each request's keys padded to a multiple of ``FLEX_KEY_BUCKET`` and unpadded (a bucket of 1).

    python benchmarks/flex_compiles.py [--device cuda] [--requests 16] [--window 1024] [--keys 100 1000]

Each request runs as a batch of its own, so that its result's notes say how it ran; dynamo is reset before each
bucket. The path compiles on a GPU only (on a CPU it runs FlexAttention eagerly, and says so).
"""

from __future__ import annotations

import argparse
import collections
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from swa_kit.attention import torch_paths  # noqa: E402
from swa_kit.attention.paths import run_path  # noqa: E402
from swa_kit.attention.batch import random_paged_batch  # noqa: E402
from swa_kit.attention.reference import reference_attention  # noqa: E402
from swa_kit.errors import WindowConventionError  # noqa: E402
from swa_kit.window import check_keys, from_keys  # noqa: E402


def run_requests(seq_lens: list[int], window: int, device: str, bucket: int, heads: tuple[int, int, int],
                 seed: int) -> str:
    """One decode request per batch, twice over (the first pass compiles): how each ran, both passes' seconds and the
    largest error against the float64 reference."""
    torch_paths.FLEX_KEY_BUCKET = bucket
    torch._dynamo.reset()
    torch_paths._COMPILED.clear()
    gen = torch.Generator().manual_seed(seed)
    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    batches = [random_paged_batch([1], [n], num_q_heads=heads[0], num_kv_heads=heads[1], head_dim=heads[2],
                                  page_size=16, window_keys=window, garbage=math.nan, dtype=dtype, device=device,
                                  generator=gen) for n in seq_lens]
    seconds, ran, err = [], collections.Counter(), 0.0
    for first_pass in (True, False):
        start = time.perf_counter()
        results = [run_path("flex_attention", batch, from_keys("flex", window)) for batch in batches]
        if device != "cpu":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        if first_pass:
            ran.update(result.notes[0] for result in results)
            err = max((r.out.double() - reference_attention(b, window).out).abs().max().item()
                      for r, b in zip(results, batches))
    how = "; ".join(f"{n} {note}" for note, n in ran.most_common())
    return (f"bucket {bucket}: first pass {seconds[0]:.2f} s, second {seconds[1]:.3f} s, max error {err:.1e}; "
            f"per request: {how}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--window", type=int, default=1024, help="keys a query attends, counting itself")
    parser.add_argument("--keys", type=int, nargs=2, default=(100, 1000), metavar=("MIN", "MAX"),
                        help="each request's length is drawn from [MIN, MAX)")
    parser.add_argument("--heads", type=int, nargs=3, default=(32, 16, 256), metavar=("HQ", "HKV", "DIM"),
                        help="query heads, KV heads, head dim (default: Gemma's sliding layers)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error(f"--requests {args.requests}: give at least 1")
    try:
        check_keys(args.window)
    except WindowConventionError as error:
        parser.error(f"--window {args.window}: {error}")
    if not 1 <= args.keys[0] < args.keys[1]:
        parser.error(f"--keys {args.keys[0]} {args.keys[1]}: lengths are drawn from [MIN, MAX), so 1 <= MIN < MAX")
    gen = torch.Generator().manual_seed(args.seed)
    seq_lens = torch.randint(args.keys[0], args.keys[1], (args.requests,), generator=gen).tolist()
    spans = sorted(min(n, args.window) for n in seq_lens)
    print(f"{args.requests} requests on {args.device} (torch {torch.__version__}), window {args.window}, "
          f"heads {args.heads}: key spans {spans}")
    padded = torch_paths.FLEX_KEY_BUCKET
    try:
        for bucket in (1, padded):
            print(run_requests(seq_lens, args.window, args.device, bucket, tuple(args.heads), args.seed))
    finally:
        torch_paths.FLEX_KEY_BUCKET = padded


if __name__ == "__main__":
    main()
