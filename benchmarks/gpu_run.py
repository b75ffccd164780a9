"""One device call: check, tune and time everything, writing results under $OUT.

    python3 benchmarks/gpu_run.py STAGES...   (stages: env tune quick tests full; default: all but full)

Runs from the repository root on the device machine, where swa_kit is not installed
(``PYTHONPATH=.``) and aiter's Triton files travel in ``.carry/site`` (see
docs/kernel-notes.md). Each stage is guarded: one failing stage never costs the others.
The last lines printed are a short table; full numbers go to $OUT/*.json and logs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ.get("OUT", ROOT / "gpu-out"))
OUT.mkdir(parents=True, exist_ok=True)
SUMMARY: list[str] = []


def stage_env() -> None:
    import torch
    import triton

    from swa_kit.attention import aiter_loader

    SUMMARY.append(f"torch {torch.__version__} triton {triton.__version__} gpu {torch.cuda.get_device_name()}")
    SUMMARY.append(f"aiter triton: {aiter_loader.aiter_triton_status()}")
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu",
                          "--format=csv"], capture_output=True, text=True)
    SUMMARY.append(smi.stdout.strip().replace("\n", " | "))


def stage_tests() -> None:
    log = OUT / "pytest_gpu.log"
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/gpu", "-q", "-x", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    log.write_text(proc.stdout + proc.stderr)
    SUMMARY.append(f"tests/gpu: rc={proc.returncode} in {time.time() - start:.0f}s: "
                   + (proc.stdout.strip().splitlines() or ["?"])[-1])


def stage_tune() -> None:
    """Split counts and tile configs of the kit's kernel at the headline shape (and B 1 / 128 for splits)."""
    import torch

    from swa_kit import bench
    from swa_kit.attention import kit_triton

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(1)
    copy = bench.copy_bandwidth_tbs(device)
    rows = []
    for batch, ctx in ((32, 32 * 1024), (1, 8 * 1024), (128, 8 * 1024)):
        case = bench.DecodeCase(batch, 32, 8, 128, ctx, 4096)
        data = bench._DecodeData(case, device, gen)
        auto = {ps: kit_triton.plan_decode(data.k, data.v, *data.tables[ps], data.seq_lens, ps, 4096, data.sm_scale,
                                           32).splits for ps in (1, 16)}
        configs = [(s, 64, 4, 3) for s in (1, 2, 3, 4, 6, 8, 16, 32, 64) if batch * 8 * s <= 8192]
        if batch == 32:
            configs += [(None, bn, w, st) for bn in (32, 64, 128) for w in (2, 4, 8) for st in (2, 3, 4)]
        for splits, bn, warps, stages in configs:
            for ps in (1, 16):
                table, row_start = data.tables[ps]
                try:
                    plan = kit_triton.plan_decode(data.k, data.v, table, row_start, data.seq_lens, ps, 4096,
                                                  data.sm_scale, 32, splits=splits, block_n=bn, num_warps=warps,
                                                  num_stages=stages)
                    out = torch.empty_like(data.q)
                    ms = bench.time_ms(lambda: plan.run(data.q, out), 10, 60)
                    rows.append({"batch": batch, "context": ctx, "page_size": ps, "splits": plan.splits,
                                 "auto_splits": auto[ps], "block_n": bn, "warps": warps, "stages": stages,
                                 "us": ms * 1e3, "copy_fraction": case.window_bytes / (ms * 1e-3) / 1e12 / copy})
                except Exception as exc:
                    rows.append({"batch": batch, "page_size": ps, "splits": splits, "block_n": bn, "warps": warps,
                                 "stages": stages, "error": f"{type(exc).__name__}: {exc}"[:200]})
        del data
        torch.cuda.empty_cache()
    (OUT / "tune.json").write_text(json.dumps({"copy_tbs": copy, "rows": rows}, indent=1))
    for batch in (32, 1, 128):
        for ps in (1, 16):
            ok = [r for r in rows if r.get("batch") == batch and r.get("page_size") == ps and "us" in r]
            if ok:
                best = min(ok, key=lambda r: r["us"])
                SUMMARY.append(f"tune B={batch} p{ps}: best {best['us']:.1f}us {best['copy_fraction']:.0%} "
                               f"splits={best['splits']} bn={best['block_n']} w={best['warps']} st={best['stages']} "
                               f"(auto splits {best['auto_splits']})")


def stage_bench(quick: bool) -> None:
    from swa_kit import bench

    cmd = "PYTHONPATH=. python3 benchmarks/gpu_run.py " + ("quick" if quick else "full")
    result = bench.run_benchmark(quick=quick, command=cmd, progress=True)
    name = "h200_quick.json" if quick else "h200_full.json"
    bench.save(result, OUT / name)
    SUMMARY.extend(bench.summary_lines(result))
    for c in result["checks"]:
        SUMMARY.append(f"  check {c.get('mode', 'decode')} {c['label']}: err {c.get('rel_error')} ok={c['correct']} "
                       f"{c.get('error', '')[:120]}")
    for row in bench.headline_table(result):
        SUMMARY.append("  " + "  ".join(f"{k}={v}" for k, v in row.items()))


STAGES = {"env": stage_env, "tests": stage_tests, "tune": stage_tune, "quick": lambda: stage_bench(True),
          "full": lambda: stage_bench(False)}


def main(argv: list[str]) -> int:
    names = argv or ["env", "tune", "quick", "tests"]
    for name in names:
        start = time.time()
        try:
            STAGES[name]()
        except Exception:
            SUMMARY.append(f"stage {name} FAILED: " + traceback.format_exc()[-1500:])
        SUMMARY.append(f"[{name} done in {time.time() - start:.0f}s]")
        (OUT / "summary.txt").write_text("\n".join(SUMMARY) + "\n")
    print("\n".join(SUMMARY))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
