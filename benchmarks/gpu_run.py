"""One device call: check, tune and time everything, writing results under $OUT.

    python3 benchmarks/gpu_run.py STAGES...   (stages: env tests_kit tests tune quick full)

Runs from the repository root on the device machine, where swa_kit is not installed
(``PYTHONPATH=.``) and aiter's Triton files travel in a carried site folder (see
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
                          "--format=csv"], capture_output=True, text=True, check=False)
    SUMMARY.append(smi.stdout.strip().replace("\n", " | "))


def _pytest(name: str, args: list[str]) -> None:
    start = time.time()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True, env=env, check=False)
    (OUT / f"pytest_{name}.log").write_text(proc.stdout + proc.stderr)
    SUMMARY.append(f"pytest {' '.join(args)}: rc={proc.returncode} in {time.time() - start:.0f}s: "
                   + (proc.stdout.strip().splitlines() or ["?"])[-1])


def stage_tests_kit() -> None:
    """The kit kernel's GPU tests alone (fast): decode grid, chain verify, sinks, graph capture."""
    _pytest("kit", ["tests/gpu/test_kit_triton_gpu.py", *(["-k", os.environ["GPU_TESTS_K"]]
                                                         if os.environ.get("GPU_TESTS_K") else [])])


def stage_tests() -> None:
    """Every GPU test file in one process, then again spread over four workers."""
    _pytest("one_process", ["tests/gpu"])
    _pytest("xdist4", ["tests/gpu", "-n", "4"])


def _tune_point(case, configs, gen, flush, copy_tbs, rows, page_size=16) -> None:
    import torch

    from swa_kit.bench import timing
    from swa_kit.bench.paths import DecodeInputs

    data = DecodeInputs(case, torch.device("cuda"), gen)
    for config in configs:
        row = {"batch": case.batch, "hq": case.hq, "hkv": case.hkv, "head_dim": case.head_dim,
               "window": case.window, "drafts": case.drafts, "page_size": page_size, **config}
        try:
            fn, _, facts = data.kit(page_size, **config)
            measured = timing.measure(fn, flush, reps=30)
            row.update(facts, us=measured["us"], method=measured["method"],
                       copy_fraction=case.window_bytes / (measured["us"] * 1e-6) / 1e12 / copy_tbs)
        except Exception as exc:  # a config that does not compile is a result too
            row["error"] = f"{type(exc).__name__}: {exc}"[:200]
        rows.append(row)
    del data
    torch.cuda.empty_cache()


def _configs(head_dim: int, verify: bool) -> list[dict]:
    """The default (empty overrides) first, then tiles x warps x stages x programs per SM around it."""
    tiles = {64: (32, 64, 128), 128: (16, 32, 64), 256: (16, 32)}[head_dim]
    base = [{}]
    if verify:  # v4: 8 and 16 KiB tiles, 4 warps (8 lost everywhere in v3's sweep)
        return base + [{"block_n": bn, "num_stages": st, "programs_per_sm": pp} for bn in tiles[-2:]
                       for st in (2, 3) for pp in (2, 4)]
    return base + [{"block_n": bn, "num_warps": w, "num_stages": st, "programs_per_sm": pp}
                   for bn in tiles for w in (4, 8) for st in (2, 3) for pp in (1, 2, 4)]


def stage_tune_verify() -> None:
    """Chain verify (2..8 drafts) against decode over the same KV, the policy's default first."""
    import torch

    from swa_kit.bench import DecodeCase, timing, verify_twin
    from swa_kit.bench.cases import HEAD_SHAPES

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(3)
    flush = timing.L2Flush(device)
    copy = timing.copy_bandwidth(device, flush)
    SUMMARY.append(f"copy {copy['tbs']:.3f} TB/s by {copy['by']}: " + ", ".join(
        f"{k} {w['tbs']:.2f}" for k, w in copy["ways"].items()))
    rows: list[dict] = []
    for hq, hkv, d, sinks in HEAD_SHAPES.values():
        for b in (8, 32):
            for ps in (1, 16):
                case = DecodeCase(b, hq, hkv, d, 8192, 4096, sinks=sinks)
                _tune_point(case, [{}], gen, flush, copy["tbs"], rows, ps)
                _tune_point(verify_twin(case), _configs(d, True) if ps == 16 else [{}], gen, flush, copy["tbs"],
                            rows, ps)
    (OUT / "tune_verify.json").write_text(json.dumps({"copy_tbs": copy["tbs"], "rows": rows}, indent=1))
    for key in sorted({(r["head_dim"], r["batch"], r["page_size"]) for r in rows}):
        mine = [r for r in rows if (r["head_dim"], r["batch"], r["page_size"]) == key and "us" in r]
        dec = next((r for r in mine if not r["drafts"]), None)
        ver = [r for r in mine if r["drafts"]]
        if dec and ver:
            best = min(ver, key=lambda r: r["us"])
            SUMMARY.append(f"verify D={key[0]} B={key[1]} p{key[2]}: decode {dec['us']:.1f}us "
                           f"({dec['copy_fraction']:.0%}); verify default {ver[0]['us']:.1f} "
                           f"({ver[0]['us'] / dec['us']:.2f}x), best {best['us']:.1f} ({best['us'] / dec['us']:.2f}x) "
                           f"bn{best['block_n']} st{best['num_stages']} s{best['splits']}")


def stage_ab_verify() -> None:
    """Verify with the per-query mask on every tile vs on the window's edge tiles only, both page sizes."""
    import torch

    from swa_kit.bench import DecodeCase, timing, verify_twin

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(4)
    flush = timing.L2Flush(device)
    copy = timing.copy_bandwidth(device, flush)["tbs"]
    rows: list[dict] = []
    for b, hq, hkv, d, w, sinks in ((32, 32, 8, 128, 4096, False), (8, 32, 8, 128, 1024, False),
                                    (32, 64, 8, 64, 4096, True), (32, 32, 16, 256, 1024, False)):
        case = DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks)
        for ps in (1, 16):
            _tune_point(case, [{}], gen, flush, copy, rows, ps)
            _tune_point(verify_twin(case), [{"edge_masks": False}, {"edge_masks": True}], gen, flush, copy, rows, ps)
    (OUT / "ab_verify.json").write_text(json.dumps({"copy_tbs": copy, "rows": rows}, indent=1))
    for r in rows:
        SUMMARY.append(f"ab B={r['batch']} D={r['head_dim']} W={r['window']} p{r['page_size']} drafts={r['drafts']} "
                       f"edge_masks={r.get('edge_masks', '-')}: {r.get('us', float('nan')):.1f}us s{r.get('splits')} "
                       f"{r.get('error', '')}")


def stage_tune() -> None:
    """Sweep tiles, warps, stages and the split policy by shape (page size 16, context 8k: time is flat in it)."""
    import torch

    from swa_kit.bench import DecodeCase, timing, verify_twin
    from swa_kit.bench.cases import HEAD_SHAPES

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(2)
    flush = timing.L2Flush(device)
    copy = timing.copy_bandwidth(device, flush)["tbs"]
    SUMMARY.append(f"copy {copy:.3f} TB/s; launch floor {timing.launch_floor(device, flush)['us']:.2f} us")
    rows: list[dict] = []
    for hq, hkv, d, sinks in HEAD_SHAPES.values():
        for b in (1, 8, 32, 128):
            for w in (1024, 4096):
                _tune_point(DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks), _configs(d, False), gen, flush, copy,
                            rows)
        for b in (8, 32):
            _tune_point(verify_twin(DecodeCase(b, hq, hkv, d, 8192, 4096, sinks=sinks)), _configs(d, True), gen,
                        flush, copy, rows)
        (OUT / "tune.json").write_text(json.dumps({"copy_tbs": copy, "rows": rows}, indent=1))
    keys = sorted({(r["head_dim"], r["batch"], r["window"], r["drafts"]) for r in rows})
    for key in keys:
        ok = [r for r in rows if (r["head_dim"], r["batch"], r["window"], r["drafts"]) == key and "us" in r]
        if ok:
            best, first = min(ok, key=lambda r: r["us"]), ok[0]
            SUMMARY.append(f"tune D={key[0]} B={key[1]} W={key[2]} drafts={key[3]}: default {first['us']:.1f}us "
                           f"{first['copy_fraction']:.0%} (s{first['splits']} bn{first['block_n']} "
                           f"w{first['num_warps']} st{first['num_stages']}); best {best['us']:.1f}us "
                           f"{best['copy_fraction']:.0%} s{best['splits']} bn{best['block_n']} w{best['num_warps']} "
                           f"st{best['num_stages']}")


def stage_bench(quick: bool) -> None:
    from swa_kit import bench
    from swa_kit.commands._output import print_table

    cmd = "PYTHONPATH=$PWD:$PWD/_site python3 benchmarks/gpu_run.py " + " ".join(sys.argv[1:])
    name = "h200_quick.json" if quick else "h200_full.json"
    result = bench.run_benchmark(quick=quick, command=cmd, progress=False, checkpoint=OUT / f"partial_{name}")
    bench.save(result, OUT / name)
    SUMMARY.extend(bench.summary_lines(result))
    SUMMARY.append(f"  launch floor {result['launch_floor']['us']:.2f} us; copy {result['copy']['us']:.1f} us "
                   f"for {result['copy']['bytes'] / 2**30:.0f} GiB")
    for c in result["checks"]:
        SUMMARY.append(f"  check prefill {c['label']}: err {c.get('rel_error')} ok={c['correct']} "
                       f"{c.get('error', '')[:120]}")
    for row in result["decode"] + result["prefill"]:
        if not row.get("correct") or row.get("note"):
            SUMMARY.append(f"  {row['mode']} {row['label']} {row['case']}: correct={row.get('correct')} "
                           f"err={row.get('rel_error')} {row.get('note', '')[:200]}")
    import contextlib
    import io

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        print_table(bench.grid_table(result))
    (OUT / f"grid_{'quick' if quick else 'full'}.txt").write_text(text.getvalue())
    SUMMARY.append(text.getvalue())


STAGES = {"env": stage_env, "tests_kit": stage_tests_kit, "tests": stage_tests, "tune": stage_tune,
          "tune_verify": stage_tune_verify, "ab_verify": stage_ab_verify,
          "tests_one": lambda: _pytest("one_process", ["tests/gpu"]),
          "tests_xdist": lambda: _pytest("xdist4", ["tests/gpu", "-n", "4"]),
          "quick": lambda: stage_bench(True), "full": lambda: stage_bench(False)}


def main(argv: list[str]) -> int:
    names = argv or ["env", "tests_kit", "quick", "tune"]
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
