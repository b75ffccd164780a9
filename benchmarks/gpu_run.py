"""One device call: check, tune and time everything, writing results under $OUT.

    python3 benchmarks/gpu_run.py STAGES...   (stages: see STAGES at the end)

Runs from the repository root on the device machine, where swa_kit is not installed
(``PYTHONPATH=.``) and aiter's Triton files travel in a carried site folder (see
docs/kernel.md). Each stage is guarded: one failing stage never costs the others.
The last lines printed are a short table; full numbers go to $OUT/*.json and logs.
"""

from __future__ import annotations

import functools
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

    from swa_kit.attention.aiter import loader

    SUMMARY.append(f"torch {torch.__version__} triton {triton.__version__} gpu {torch.cuda.get_device_name()}")
    SUMMARY.append(f"aiter triton: {loader.aiter_triton_status()}")
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


def _kernel_names(fn) -> list[str]:
    """The GPU kernels one call of ``fn`` launches, by name (which SDPA backend ran, say)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})


VERIFY_PATHS = (("kit_triton_swa", 1), ("kit_triton_swa", 16), ("aiter_triton_unified", 16), ("sdpa_window", None),
                ("flex_attention", None))


def stage_verify_paths() -> None:
    """Each path's chain verify over its own decode, on the same KV (B ``AB_BATCHES``, default 1-128; every head shape
    and window; 8k): the kit at page sizes 1 and 16, aiter's ``unified_attention`` at 16, SDPA over the pre-sliced keys
    some query attends (masked per query in a verify), FlexAttention over the whole context. The verify brings DRAFTS
    queries in every request (the torch paths take one q_len per batch; SGLang's target verify brings as many in each),
    and the kit's ragged verify of the grid is timed beside it. Every output is checked against its float64 reference
    (the torch paths' without sinks: they take none). aiter's kernel loads whole tiles of keys, so a verify's first
    tile reaches the dummy page's NaN (the hazard ``swa_kit.attention.aiter.triton_kernels`` documents): where its
    output is not finite, it is checked again with the dummy page zeroed (``finite_dummy_rel_error``). SDPA's rows
    name the GPU kernels one call launches (which backend ran)."""
    import torch

    from swa_kit.measure.bench import DecodeCase, timing, verify_twin
    from swa_kit.measure.bench.cases import HEAD_SHAPES
    from swa_kit.measure.bench.paths import PAGE, DecodeInputs
    from swa_kit.measure.bench.run import TOLERANCE, relative_error, time_and_check

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(10)
    flush = timing.L2Flush(device)
    rows: list[dict] = []
    for hq, hkv, d, sinks in HEAD_SHAPES.values():
        for b in map(int, os.environ.get("AB_BATCHES", "1,8,32,128").split(",")):
            for w in (128, 1024, 4096):
                data = DecodeInputs(DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks), device, gen)
                modes = {"decode": data, "verify": data.with_queries(verify_twin(data.case, ragged=False)),
                         "verify_ragged": data.with_queries(verify_twin(data.case))}
                for mode, inputs in modes.items():
                    paths = VERIFY_PATHS[:2] if mode == "verify_ragged" else VERIFY_PATHS
                    # the torch paths (page size None) take no sinks: their reference has none either
                    refs = {ps: inputs.reference(ps or 16, with_sinks=ps is not None) for ps in {p for _, p in paths}}
                    for path, ps in paths:
                        make = {"kit_triton_swa": functools.partial(inputs.kit, ps), "sdpa_window": inputs.sdpa_window,
                                "aiter_triton_unified": inputs.aiter, "flex_attention": inputs.flex}[path]
                        measured, correct, note = time_and_check(make, refs[ps], flush, 30)
                        measured = measured or {}
                        row = {"batch": b, "hq": hq, "hkv": hkv, "head_dim": d, "window": w, "mode": mode,
                               "path": path, "page_size": ps, "q_lens": sorted(set(inputs.q_lens)), "correct": correct,
                               "note": "; ".join(filter(None, [measured.get("note"), note])),
                               **{k: measured.get(k) for k in ("us", "p10_us", "p90_us", "method", "rel_error")}}
                        if measured and path == "sdpa_window":
                            row["kernels"] = [name[:120] for name in _kernel_names(make()[0])]
                        if path == "aiter_triton_unified" and measured and row["rel_error"] != row["rel_error"]:
                            fn = make()[0]
                            try:
                                for buffer in (inputs.k, inputs.v):
                                    buffer[:PAGE] = 0.0
                                error = relative_error(fn(), refs[ps])
                            finally:  # the next paths' checks need the NaN back
                                for buffer in (inputs.k, inputs.v):
                                    buffer[:PAGE] = float("nan")
                            row.update(finite_dummy_rel_error=error, finite_dummy_correct=error < TOLERANCE)
                        rows.append(row)
                del data, modes
                torch.cuda.empty_cache()
        (OUT / "verify_paths.json").write_text(json.dumps({"rows": rows}, indent=1))
    us = {(r["head_dim"], r["batch"], r["window"], r["path"], r["page_size"], r["mode"]): r.get("us") for r in rows}
    for (d, b, w, path, ps, mode), t in us.items():
        base = us.get((d, b, w, path, ps, "decode"))
        if mode == "verify":
            ratio = f"{t / base:.3f}" if t and base else "failed"
            SUMMARY.append(f"verify/decode D={d} B={b} W={w} {path}@{ps}: {ratio} (decode {base} us)")


def stage_bench(quick: bool) -> None:
    from swa_kit.measure import bench
    from swa_kit.tables import print_table

    cmd = "PYTHONPATH=$PWD:$PWD/build/gpu/_site python3 benchmarks/gpu_run.py " + " ".join(sys.argv[1:])
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


def stage_ab_flush() -> None:
    """How the L2 flush before each timed replay changes each path's time: zeroing a buffer (dirty lines left
    in L2), summing it (clean lines), or no flush at all; decode cells at 8k, page size 16."""
    import torch

    from swa_kit.measure.bench import DecodeCase, timing
    from swa_kit.measure.bench.cases import HEAD_SHAPES
    from swa_kit.measure.bench.paths import DecodeInputs

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(12)
    flushes = {"write": timing.L2Flush(device, by="write"), "read": timing.L2Flush(device, by="read"),
               "none": lambda: None}
    rows: list[dict] = []
    for hq, hkv, d, sinks in HEAD_SHAPES.values():
        for b in map(int, os.environ.get("AB_BATCHES", "8,32,128").split(",")):
            for w in (128, 1024, 4096):
                case = DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks)
                data = DecodeInputs(case, device, gen)
                stream = torch.randn(case.window_bytes // 2, device=device, dtype=torch.bfloat16, generator=gen)
                paths = {"kit": data.kit(16)[0], "sdpa_window": data.sdpa_window()[0],
                         "read_stream": lambda stream=stream: stream.sum(dtype=torch.float32)}
                for flush_name, flush in flushes.items():
                    row = {"batch": b, "hq": hq, "head_dim": d, "window": w, "bytes": case.window_bytes,
                           "flush": flush_name}
                    for name, fn in paths.items():
                        row[name] = timing.measure(fn, flush, 50)["us"]
                    copy = timing.copy_bandwidth(device, flush, case.window_bytes)
                    row["copy"], row["copy_by"] = copy["us"], copy["by"]
                    rows.append(row)
                del data, stream, paths
                torch.cuda.empty_cache()
        (OUT / "ab_flush.json").write_text(json.dumps({"rows": rows}, indent=1))
    for r in rows:
        SUMMARY.append(f"flush={r['flush']:<5} D={r['head_dim']} B={r['batch']} W={r['window']} "
                       f"{r['bytes'] / 2**20:.0f}MiB: kit {r['kit']:.1f} sdpa {r['sdpa_window']:.1f} "
                       f"stream {r['read_stream']:.1f} copy {r['copy']:.1f} ({r['copy_by']}) "
                       f"kit/copy {r['copy'] / r['kit']:.2f} kit/sdpa {r['sdpa_window'] / r['kit']:.2f}")


def stage_ncu() -> None:
    """Hardware counters of the cells that miss their targets, beside cells that meet them (ncu_cells.py)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ncu_cells.py")], capture_output=True, text=True,
                          check=False)
    (OUT / "ncu_stage.log").write_text(proc.stdout + proc.stderr)
    SUMMARY.append(f"ncu_cells rc={proc.returncode}:\n" + (proc.stdout + proc.stderr)[-6000:])


STAGES = {"env": stage_env, "tests_kit": stage_tests_kit, "tests": stage_tests,
          "tests_one": lambda: _pytest("one_process", ["tests/gpu"]),
          "tests_xdist": lambda: _pytest("xdist4", ["tests/gpu", "-n", "4"]),
          "quick": lambda: stage_bench(True), "full": lambda: stage_bench(False),
          "verify_paths": stage_verify_paths, "ab_flush": stage_ab_flush, "ncu": stage_ncu}
DEFAULT_STAGES = ("env", "tests_kit", "quick")


def main(argv: list[str]) -> int:
    names = argv or list(DEFAULT_STAGES)
    unknown = [name for name in names if name not in STAGES]
    if unknown:  # refused before any stage runs: a typo would otherwise cost a device call
        print(f"unknown stage(s) {unknown}; known: {', '.join(STAGES)}", file=sys.stderr)
        return 2
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
