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
    select = os.environ.get("GPU_TESTS_K")  # e.g. "256 and bfloat16" to re-check one slice of the grid
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/gpu/test_kit_triton_gpu.py", "-q",
                           "-p", "no:cacheprovider", *(["-k", select] if select else [])], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    log.write_text(proc.stdout + proc.stderr)
    SUMMARY.append(f"tests/gpu/test_kit_triton_gpu.py: rc={proc.returncode} in {time.time() - start:.0f}s: "
                   + (proc.stdout.strip().splitlines() or ["?"])[-1])


def _sweep(case, configs, gen, copy, rows) -> None:
    import torch

    from swa_kit import bench
    from swa_kit.attention import kit_triton

    data = bench._DecodeData(case, torch.device("cuda"), gen)
    for splits, bn, warps, stages, ppsm in configs:
        for ps in (1, 16):
            table, row_start = data.tables[ps]
            row = {"batch": case.batch, "hkv": case.hkv, "head_dim": case.head_dim, "context": case.context,
                   "page_size": ps, "block_n": bn, "warps": warps, "stages": stages, "ppsm": ppsm}
            try:
                plan = kit_triton.plan_decode(data.k, data.v, table, row_start, data.seq_lens, ps, case.window,
                                              data.sm_scale, case.hq, splits=splits, block_n=bn, num_warps=warps,
                                              num_stages=stages, programs_per_sm=ppsm)
                out = torch.empty_like(data.q)
                ms = bench.time_ms(lambda: plan.run(data.q, out), 10, 60)
                row.update(splits=plan.splits, block_n=plan.block_n, us=ms * 1e3,
                           copy_fraction=case.window_bytes / (ms * 1e-3) / 1e12 / copy)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:200]
            rows.append(row)
    del data
    torch.cuda.empty_cache()


def stage_tune() -> None:
    """v2 sweep: tile size, warps, stages, programs per SM around the defaults, at several shapes.

    ``None`` means the kernel's default; the first config of each shape is the default itself.
    """
    import torch

    from swa_kit import bench

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(2)
    copy = bench.copy_bandwidth_tbs(device)
    rows: list[dict] = []
    default = (None, None, 4, 3, 4)
    head = [default] + [(None, bn, w, st, pp) for bn in (16, 32, 64) for w in (2, 4) for st in (3, 4)
                        for pp in (2, 4, 8) if (bn, w, st, pp) != (32, 4, 3, 4)]
    _sweep(bench.DecodeCase(32, 32, 8, 128, 32 * 1024, 4096), head, gen, copy, rows)
    d256 = [default] + [(None, bn, w, st, 4) for bn in (16, 32) for w in (4, 8) for st in (2, 3)]
    _sweep(bench.DecodeCase(32, 32, 8, 256, 8 * 1024, 4096), d256, gen, copy, rows)
    for batch in (1, 128):
        _sweep(bench.DecodeCase(batch, 32, 8, 128, 8 * 1024, 4096), [default, (None, None, 4, 3, 2),
                                                                      (None, None, 4, 3, 8)], gen, copy, rows)
    (OUT / "tune2.json").write_text(json.dumps({"copy_tbs": copy, "rows": rows}, indent=1))
    for key in sorted({(r["batch"], r["head_dim"], r["page_size"]) for r in rows}):
        ok = [r for r in rows if (r["batch"], r["head_dim"], r["page_size"]) == key and "us" in r]
        if ok:
            best, first = min(ok, key=lambda r: r["us"]), ok[0]
            SUMMARY.append(f"tune B={key[0]} D={key[1]} p{key[2]}: default {first['us']:.1f}us "
                           f"{first['copy_fraction']:.0%} (splits {first['splits']}, bn {first['block_n']}); best "
                           f"{best['us']:.1f}us {best['copy_fraction']:.0%} splits={best['splits']} "
                           f"bn={best['block_n']} w={best['warps']} st={best['stages']} ppsm={best['ppsm']}")


def stage_bench(quick: bool) -> None:
    from swa_kit import bench

    cmd = "PYTHONPATH=. python3 benchmarks/gpu_run.py " + ("quick" if quick else "full")
    name = "h200_quick.json" if quick else "h200_full.json"
    result = bench.run_benchmark(quick=quick, command=cmd, progress=True, checkpoint=OUT / f"partial_{name}")
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
