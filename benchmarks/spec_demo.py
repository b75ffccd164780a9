"""Time the whole ``swa-kit spec-demo`` run (target: under 60 s on 2 CPU cores).

    python benchmarks/spec_demo.py
"""

from __future__ import annotations

import os
import time

import torch

from swa_kit.lessons.tiny_model import load_models
from swa_kit.lessons.speculative import run_demo


def main() -> None:
    torch.set_num_threads(1)  # as swa-kit spec-demo does: tiny ops, no oversubscription
    start = time.perf_counter()
    models = load_models()
    loaded = time.perf_counter() - start
    result = run_demo(models)
    total = time.perf_counter() - start
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (the demo runs on CPU)"
    print(f"cores available: {len(os.sched_getaffinity(0))}, torch threads: {torch.get_num_threads()}, {device}")
    print(f"checkpoint load: {loaded:.3f} s")
    print(f"spec-demo: {result['seconds']:.1f} s ({len(result['rows'])} speculative runs + plain + guard run)")
    print(f"total: {total:.1f} s")


if __name__ == "__main__":
    main()
