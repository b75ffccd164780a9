"""One device call: check, tune and time everything, writing results under $OUT.

    python3 benchmarks/gpu_run.py STAGES...   (stages: see STAGES at the end)

Runs from the repository root on the device machine, where swa_kit is not installed
(``PYTHONPATH=.``) and aiter's Triton files travel in a carried site folder (see
docs/kernel-notes.md). Each stage is guarded: one failing stage never costs the others.
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
from benchmarks.kernel_variants import load_variant  # noqa: E402

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


def _tune_point(case, configs, gen, flush, copy_tbs, rows, page_size=16, data=None) -> None:
    import torch

    from swa_kit.measure.bench import timing
    from swa_kit.measure.bench.paths import DecodeInputs

    data = data or DecodeInputs(case, torch.device("cuda"), gen)
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


def _configs(head_dim: int, verify: bool) -> list[dict]:
    """The default (empty overrides) first, then tiles x warps x stages x programs per SM around it."""
    tiles = {64: (32, 64, 128), 128: (16, 32, 64), 256: (16, 32)}[head_dim]
    base = [{}]
    if verify:  # v6: the edge tile prefetched or not (both ways round the policy), the split merge fused
        return base + [{"edge_prefetch": 0}, {"edge_prefetch": 1}, {"fused_merge": 1}]
    return base + [{"block_n": bn, "num_warps": w, "num_stages": st, "programs_per_sm": pp}
                   for bn in tiles for w in (4, 8) for st in (2, 3) for pp in (1, 2, 4)]


def stage_tune_verify() -> None:
    """Chain verify (2..8 drafts) against decode over the same KV on every shape of the grid at 8k context,
    the policy's default first, then a few configurations around it; at B 1 decode's split of short windows too."""
    import torch

    from swa_kit.measure.bench import DecodeCase, timing, verify_twin
    from swa_kit.measure.bench.cases import HEAD_SHAPES
    from swa_kit.measure.bench.paths import DecodeInputs

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(3)
    flush = timing.L2Flush(device)
    copy = timing.copy_bandwidth(device, flush)
    SUMMARY.append(f"copy {copy['tbs']:.3f} TB/s by {copy['by']}")
    rows: list[dict] = []
    deadline = time.time() + float(os.environ.get("TUNE_SECONDS", "330"))
    for hq, hkv, d, sinks in HEAD_SHAPES.values():
        for b in (1, 8, 32, 128):
            for w in (128, 1024, 4096):
                if time.time() > deadline:
                    SUMMARY.append(f"tune_verify: out of time before B={b} D={d} W={w}")
                    break
                case = DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks)
                data = DecodeInputs(case, device, gen)
                twin = data.with_queries(verify_twin(case))
                decode_configs = [{}] + ([{"min_chunk": c} for c in (32, 64, 128)] if b == 1 else [])
                for ps in (1, 16):
                    _tune_point(case, decode_configs, gen, flush, copy["tbs"], rows, ps, data)
                    _tune_point(twin.case, _configs(d, True), gen, flush, copy["tbs"], rows, ps, twin)
                del data, twin
                torch.cuda.empty_cache()
                (OUT / "tune_verify.json").write_text(json.dumps({"copy_tbs": copy["tbs"], "rows": rows}, indent=1))
    for key in sorted({(r["head_dim"], r["batch"], r["window"], r["page_size"]) for r in rows}):
        mine = [r for r in rows if (r["head_dim"], r["batch"], r["window"], r["page_size"]) == key and "us" in r]
        dec = [r for r in mine if not r["drafts"]]
        ver = [r for r in mine if r["drafts"]]
        if dec and ver:
            ratios = " ".join(f"{r['us'] / dec[0]['us']:.2f}" for r in ver)  # in _configs' order
            others = " ".join(f"{r['us']:.1f} (s{r.get('splits')})" for r in dec[1:])  # B 1: the shorter chunks
            SUMMARY.append(f"verify D={key[0]} B={key[1]} W={key[2]} p{key[3]}: decode {dec[0]['us']:.1f}us {others}; "
                           f"verify/decode {ratios}")


def stage_ab_layout() -> None:
    """The kit over randomly permuted pages vs pages in order, beside SDPA over the contiguous window, at every
    decode cell of B 8-128 (8k): what the paged, scattered layout costs against the ideal one."""
    import torch

    from swa_kit.measure.bench import DecodeCase, timing
    from swa_kit.measure.bench.paths import DecodeInputs

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(5)
    flush = timing.L2Flush(device)
    copy = timing.copy_bandwidth(device, flush)["tbs"]
    rows: list[dict] = []
    from swa_kit.measure.bench.cases import HEAD_SHAPES

    cells = [(b, *shape, w) for shape in HEAD_SHAPES.values() for b in (8, 32, 128) for w in (128, 1024, 4096)]
    for b, hq, hkv, d, sinks, w in cells:
        case = DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks)
        for in_order in (False, True):
            data = DecodeInputs(case, device, gen, pages_in_order=in_order)
            for ps in (1, 16):
                before = len(rows)
                _tune_point(case, [{}], gen, flush, copy, rows, ps, data)
                rows[before]["pages_in_order"] = in_order
            if not in_order:
                measured = timing.measure(data.sdpa_window()[0], flush, reps=30)
                rows.append({"batch": b, "head_dim": d, "hq": hq, "window": w, "path": "sdpa_window",
                             "us": measured["us"], "method": measured["method"]})
            del data
            torch.cuda.empty_cache()
    (OUT / "ab_layout.json").write_text(json.dumps({"copy_tbs": copy, "rows": rows}, indent=1))
    for r in rows:
        SUMMARY.append(f"layout B={r['batch']} Hq={r['hq']} D={r['head_dim']} W={r['window']} "
                       f"{r.get('path', 'kit p' + str(r.get('page_size')))} in_order={r.get('pages_in_order', '-')}: "
                       f"{r.get('us', float('nan')):.1f}us {r.get('error', '')}")


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


def stage_ab_kv_layout() -> None:
    """The kit over the pool's token-major layout (SGLang's ``[slot, kv_head, dim]``: one key of one head is a
    ``head_dim`` run, the next key of that head a whole token row further on) against the same values in a
    head-major copy (``[kv_head, slot, dim]`` viewed as ``[slot, kv_head, dim]``: a head's keys back to back, as
    SDPA's pre-sliced window holds them), decode and verify, page sizes 1 and 16, beside SDPA over the window (and
    the kernels it ran). The page tables, the plan and the kernel are the same; only the strides differ.
    ``AB_BATCHES`` and ``AB_WINDOWS`` choose the cells (default: every cell of B 8-128 at 8k)."""
    import copy

    import torch

    from swa_kit.attention.kit import kernel as kit_triton
    from swa_kit.measure.bench import DecodeCase, timing, verify_twin
    from swa_kit.measure.bench.cases import HEAD_SHAPES
    from swa_kit.measure.bench.paths import DecodeInputs

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(13)
    flush = timing.L2Flush(device)
    rows: list[dict] = []

    def head_major(t: torch.Tensor) -> torch.Tensor:
        return t.transpose(0, 1).contiguous().transpose(0, 1)

    for hq, hkv, d, sinks in HEAD_SHAPES.values():
        for b in map(int, os.environ.get("AB_BATCHES", "8,32,128").split(",")):
            for w in map(int, os.environ.get("AB_WINDOWS", "128,1024,4096").split(",")):
                case = DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks)
                data = DecodeInputs(case, device, gen)
                twin = data.with_queries(verify_twin(case))
                k_hm, v_hm = head_major(data.k), head_major(data.v)
                for inputs in (data, twin):
                    by_head = copy.copy(inputs)
                    by_head.k, by_head.v = k_hm, v_hm
                    for ps in (1, 16):
                        ref = inputs.reference(ps)
                        for layout, laid_out in (("token_major", inputs), ("head_major", by_head)):
                            row = {"batch": b, "hq": hq, "head_dim": d, "window": w, "page_size": ps,
                                   "drafts": inputs.case.drafts, "layout": layout}
                            row.update(_time_plan(kit_triton, laid_out, ps, {}, flush, ref))
                            rows.append(row)
                sdpa = data.sdpa_window()[0]
                rows.append({"batch": b, "hq": hq, "head_dim": d, "window": w, "path": "sdpa_window",
                             "us": timing.measure(sdpa, flush, 30)["us"], "kernels": _kernel_names(sdpa)})
                del data, twin, k_hm, v_hm, by_head
                torch.cuda.empty_cache()
            (OUT / "ab_kv_layout.json").write_text(json.dumps({"rows": rows}, indent=1))
    for r in rows:
        what = "sdpa " + ",".join(n[:60] for n in r["kernels"]) if "kernels" in r else \
            f"p{r['page_size']} drafts={r['drafts']} {r['layout']}"
        SUMMARY.append(f"kv_layout D={r['head_dim']} B={r['batch']} W={r['window']} {what}: "
                       f"{r.get('us', float('nan')):.1f}us s{r.get('splits', '-')} err={r.get('rel_error', '-')} "
                       f"{r.get('error', '')}")


# (Hq, Hkv, D, sinks, B) of the window sweep: the two shapes where SDPA beats the kit by most, and two controls.
SWEEP_SHAPES = ((32, 16, 256, False, 8), (32, 8, 128, False, 32), (32, 8, 128, False, 8), (64, 8, 64, True, 32))
SWEEP_WINDOWS = (256, 512, 1024, 1536, 2048, 3072, 4096)
SWEEP_FIT_FROM = 1024  # the lines are fitted from this window on, where the policy's split count settles


def fit_fixed_and_rate(nbytes: list[int], us: list[float]) -> tuple[float, float]:
    """Least squares of ``time = fixed + bytes / rate``: ``(fixed in us, rate in TB/s)``; refused below two points."""
    import numpy as np

    if len(nbytes) < 2 or len(set(nbytes)) < 2:
        raise ValueError(f"a line needs two byte counts at least; got {sorted(set(nbytes))}")
    slope, fixed = np.polyfit(nbytes, us, 1)  # slope in us per byte
    return float(fixed), float(1e-6 / slope)


def stage_ab_window_sweep() -> None:
    """Decode time against window at a fixed batch (8k context), for the kit (page sizes 1 and 16), SDPA over the
    window and one read of the same bytes, each fitted by least squares to ``time = fixed + bytes / rate`` from
    SWEEP_FIT_FROM keys on: what a path pays whatever it reads (launch, prologue, merge) apart from how fast it
    streams. ``SWEEP_CONFIGS`` (a JSON list of launch overrides) and copies of kit_triton.py in ``$KIT_VARIANTS``
    add kit lines at page size 16; every kit output is checked against the float64 reference."""
    import torch

    from swa_kit.attention.kit import kernel as kit_triton
    from swa_kit.measure.bench import DecodeCase, timing
    from swa_kit.measure.bench.paths import DecodeInputs

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(14)
    flush = timing.L2Flush(device)
    configs = json.loads(os.environ.get("SWEEP_CONFIGS", "[]"))
    arms = [(f"kit p{ps}", kit_triton, ps, {}) for ps in (1, 16)]
    arms += [(f"kit p16 {json.dumps(c)}", kit_triton, 16, c) for c in configs]
    arms += [(f"kit p16 {name}", module, 16, {}) for name, module in _variants().items()]
    rows: list[dict] = []
    for hq, hkv, d, sinks, b in SWEEP_SHAPES:
        for w in SWEEP_WINDOWS:
            case = DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks)
            data = DecodeInputs(case, device, gen)
            base = {"batch": b, "hq": hq, "head_dim": d, "window": w, "bytes": case.window_bytes}
            refs = {ps: data.reference(ps) for ps in (1, 16)}
            for path, module, ps, config in arms:
                rows.append({**base, "path": path, **_time_plan(module, data, ps, config, flush, refs[ps])})
            sdpa = timing.measure(data.sdpa_window()[0], flush, 30)
            read = timing.read_bandwidth(device, flush, case.window_bytes)
            rows += [{**base, "path": "sdpa_window", "us": sdpa["us"]}, {**base, "path": "read_same", "us": read["us"]}]
            del data, refs
            torch.cuda.empty_cache()
    fits = []
    for hq, hkv, d, _, b in SWEEP_SHAPES:
        for path in [arm[0] for arm in arms] + ["sdpa_window", "read_same"]:
            mine = [r for r in rows if "us" in r and r["window"] >= SWEEP_FIT_FROM
                    and (r["hq"], r["head_dim"], r["batch"], r["path"]) == (hq, d, b, path)]
            times = " ".join(f"W{r['window']} {r['us']:.1f}" + (f"/s{r['splits']}" if "splits" in r else "")
                             for r in mine)
            try:
                fixed, rate = fit_fixed_and_rate([r["bytes"] for r in mine], [r["us"] for r in mine])
            except ValueError as exc:  # an arm that failed to compile or run: say so, fit nothing
                SUMMARY.append(f"sweep B={b} {hq}/{hkv}/{d} {path:<24}: no line ({exc}); {times}")
                continue
            fits.append({"batch": b, "hq": hq, "head_dim": d, "path": path, "fixed_us": fixed, "rate_tbs": rate})
            SUMMARY.append(f"sweep B={b} {hq}/{hkv}/{d} {path:<24}: fixed {fixed:5.1f} us, streams at {rate:.2f} TB/s; "
                           f"{times}")
    worst = max((r.get("rel_error", 0.0) for r in rows), default=0.0)
    SUMMARY.append(f"sweep: worst kit error against float64 {worst:.1e}; errors: "
                   f"{[r['error'] for r in rows if 'error' in r] or 'none'}")
    (OUT / "ab_window_sweep.json").write_text(json.dumps({"rows": rows, "fits": fits}, indent=1))


def _variants() -> dict:
    """The kernel copies in ``$KIT_VARIANTS`` by file stem (none when unset); a folder that is not there is refused,
    so that a mistyped path cannot drop the comparison silently."""
    if not os.environ.get("KIT_VARIANTS"):
        return {}
    folder = Path(os.environ["KIT_VARIANTS"])
    if not folder.is_dir():
        raise FileNotFoundError(f"KIT_VARIANTS={str(folder)!r} is not a folder; name one holding kit_triton.py copies")
    return {path.stem: load_variant(path) for path in sorted(folder.glob("*.py"))}


def _time_plan(module, inputs, page_size: int, config: dict, flush, ref=None) -> dict:
    """Time one kernel module's plan on ``inputs`` (and check it against ``ref``); errors become the result."""
    import torch

    from swa_kit.measure.bench import timing

    c = inputs.case
    try:
        table, row_start = inputs.tables[page_size]
        plan = module.plan_decode(inputs.k, inputs.v, table, row_start, inputs.seq_lens, page_size, c.window,
                                  inputs.sm_scale, c.hq, q_start=inputs.q_start, max_q_len=max(inputs.q_lens),
                                  sinks=inputs.sinks, max_seq_len=c.context, **config)
        out = torch.empty_like(inputs.q)
        timed = timing.measure(functools.partial(plan.run, inputs.q, out), flush, 30)
        result = {"splits": plan.splits, "us": timed["us"]}
        if ref is not None:
            out.fill_(float("nan"))
            plan.run(inputs.q, out)
            result["rel_error"] = float((out.double() - ref).norm() / ref.norm())
        return result
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}


# (B, Hq, Hkv, D, W, sinks) of the variant A/B: small windows and B 8, where verify's edge tile is on the
# critical path, and two cells at the DRAM ceiling. (The register-cap A/B of v5 ran an earlier list; its
# JSON keeps every row's shape.)
AB_CELLS = ((8, 32, 8, 128, 128, False), (32, 32, 8, 128, 128, False), (8, 32, 16, 256, 128, False),
            (8, 64, 8, 64, 128, True), (8, 32, 8, 128, 1024, False), (8, 32, 8, 128, 4096, False),
            (32, 32, 8, 128, 4096, False), (32, 64, 8, 64, 4096, True))


def stage_ab_variants() -> None:
    """Kernel variants (copies of kit_triton.py in $KIT_VARIANTS) against the current one: decode and verify over
    the same KV, each output checked against the float64 reference."""
    import torch

    from swa_kit.attention.kit import kernel as kit_triton
    from swa_kit.measure.bench import DecodeCase, timing, verify_twin
    from swa_kit.measure.bench.paths import DecodeInputs

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(6)
    flush = timing.L2Flush(device)
    variants = {"current": kit_triton, **_variants()}
    verify_configs = [{}, {"max_registers": 0}, {"num_stages": 2}, {"num_stages": 5}]
    rows: list[dict] = []
    for b, hq, hkv, d, w, sinks in AB_CELLS:
        case = DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks)
        data = DecodeInputs(case, device, gen)
        twin = data.with_queries(verify_twin(case))
        for ps in (1, 16):
            ref = twin.reference(ps)
            for name, module in variants.items():
                verify = module.launch_config(d, hq // hkv, max(twin.q_lens))
                tile_keys = ("rows", "block_n", "num_stages", "max_registers")
                same_rows = {k: verify[k] for k in tile_keys} if "rows" in verify else None
                decode_configs = [{}, {"max_registers": 0}, same_rows] if name == "current" else [{}]
                for inputs, configs in ((data, decode_configs), (twin, verify_configs)):
                    for config in configs if name == "current" else [{}]:
                        row = {"variant": name, "batch": b, "hq": hq, "head_dim": d, "window": w, "page_size": ps,
                               "drafts": inputs.case.drafts, **config}
                        row.update(_time_plan(module, inputs, ps, config, flush, ref if inputs is twin else None))
                        rows.append(row)
        del data, twin
        torch.cuda.empty_cache()
        (OUT / "ab_variants.json").write_text(json.dumps({"variants": list(variants), "rows": rows}, indent=1))
    for r in rows:
        over = {k: r[k] for k in ("num_stages", "programs_per_sm", "max_registers", "rows", "block_n") if k in r}
        SUMMARY.append(f"{r['variant']:<16} B={r['batch']} D={r['head_dim']} W={r['window']} p{r['page_size']} "
                       f"drafts={r['drafts']} {over or ''}: {r.get('us', float('nan')):.1f}us s{r.get('splits')} "
                       f"err={r.get('rel_error', '-')} {r.get('error', '')}")


def stage_ab_merge() -> None:
    """Split windows merged by the last split to finish (one launch) vs by a second kernel, and chunks as short as
    one tile, on decode and verify over the same KV at the batches that split (B 1, 8, 32), each output checked
    against the float64 reference after the timed graph replays (the split counters must reset every call).

    ``AB_CONFIGS`` (a JSON list of launch overrides, or a dict of such lists by head_dim: a head_dim it lacks
    runs the policy alone), ``AB_BATCHES``,
    ``AB_WINDOWS`` and ``AB_PAGE_SIZE`` (one or several) time other switches the same way (the table read ahead:
    ``'[{}, {"table_ahead": 1}]'``, ``8,32,128``, ``1``). Decode runs only the configs that apply to it. Copies of
    kit_triton.py in ``$KIT_VARIANTS`` (an earlier build) run their own policy beside them, in the same cells."""
    import torch

    from swa_kit.attention.kit import kernel as kit_triton
    from swa_kit.measure.bench import DecodeCase, timing, verify_twin
    from swa_kit.measure.bench.cases import HEAD_SHAPES
    from swa_kit.measure.bench.paths import DecodeInputs

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(7)
    flush = timing.L2Flush(device)
    rows: list[dict] = []
    chosen = json.loads(os.environ["AB_CONFIGS"]) if os.environ.get("AB_CONFIGS") else None
    verify_only = {"edge_prefetch", "edge_split", "edge_in_walk"}  # a decode launch ignores them
    variants = _variants()
    for hq, hkv, d, sinks in HEAD_SHAPES.values():
        tile = kit_triton.block_n_for(d)
        configs = chosen.get(str(d), [{}]) if isinstance(chosen, dict) else chosen or [
            {}, {"fused_merge": 1}, {"fused_merge": 1, "max_registers": 128}, {"min_chunk": tile},
            {"min_chunk": tile, "fused_merge": 1}]
        for b in map(int, os.environ.get("AB_BATCHES", "1,8,32").split(",")):
            for w in map(int, os.environ.get("AB_WINDOWS", "128,1024,4096").split(",")):
                case = DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks)
                data = DecodeInputs(case, device, gen)
                twin = data.with_queries(verify_twin(case))
                for ps in map(int, os.environ.get("AB_PAGE_SIZE", "16").split(",")):
                    for inputs in (data, twin):
                        ref = inputs.reference(ps)
                        runs = [("current", kit_triton, c) for c in configs
                                if inputs is twin or not verify_only & set(c)]
                        for variant, module, config in runs + [(name, m, {}) for name, m in variants.items()]:
                            row = {"variant": variant, "batch": b, "hq": hq, "head_dim": d, "window": w,
                                   "page_size": ps, "drafts": inputs.case.drafts,
                                   "overrides": config}  # "splits": what ran
                            row.update(_time_plan(module, inputs, ps, config, flush, ref))
                            rows.append(row)
                del data, twin
                torch.cuda.empty_cache()
        (OUT / "ab_merge.json").write_text(json.dumps({"rows": rows}, indent=1))
    for r in rows:
        SUMMARY.append(f"merge {r['variant']} D={r['head_dim']} B={r['batch']} W={r['window']} p{r['page_size']} "
                       f"drafts={r['drafts']} {r['overrides']}: "
                       f"{r.get('us', float('nan')):.1f}us s{r.get('splits')} err={r.get('rel_error', '-'):.1e} "
                       f"{r.get('error', '')}" if "us" in r else f"merge {r}")


# What a verify's time is made of, beside decode's: the same decode in the verify's query tile, over the keys the
# verify's longest chain reads (the window and q_len - 1 more: one tile more to walk where the window is whole
# tiles), and both at once.
SPAN_ROWS = ("decode", "decode_verify_tile", "decode_verify_keys", "decode_verify_keys_tile", "verify")


def _span_row(cell: dict, what: str, keys: int, measured: dict | None, correct: bool | None, note: str) -> dict:
    kept = ("us", "method", "rel_error", "splits", "chunk", "rows", "block_n", "num_stages", "max_registers")
    return {**cell, "what": what, "keys": keys, "correct": correct, "note": note,
            **{k: v for k, v in (measured or {}).items() if k in kept}}


def stage_verify_span() -> None:
    """Per cell (B ``AB_BATCHES``, default 1-128; every head shape and window; 8k; page sizes 1 and 16): decode,
    decode in the verify's query tile (its rows, key tile, stages and register cap), decode over as many keys as the
    verify reads (window + DRAFTS - 1) in decode's tile and in the verify's, and the verify itself. Every output is
    checked against its float64 reference (the wider window's, where it is wider)."""
    import torch

    from swa_kit.measure.bench import DecodeCase, timing, verify_twin
    from swa_kit.measure.bench.cases import HEAD_SHAPES
    from swa_kit.measure.bench.paths import DecodeInputs
    from swa_kit.measure.bench.run import time_and_check

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(8)
    flush = timing.L2Flush(device)
    tile_keys = ("rows", "block_n", "num_stages", "max_registers")
    rows: list[dict] = []
    for hq, hkv, d, sinks in HEAD_SHAPES.values():
        for b in map(int, os.environ.get("AB_BATCHES", "1,8,32,128").split(",")):
            for w in (128, 1024, 4096):
                data = DecodeInputs(DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks), device, gen)
                twin = data.with_queries(verify_twin(data.case))
                for ps in (1, 16):
                    cell = {"batch": b, "hq": hq, "hkv": hkv, "head_dim": d, "window": w, "page_size": ps}
                    verified = time_and_check(functools.partial(twin.kit, ps), twin.reference(ps), flush, 30)
                    tile = {k: verified[0][k] for k in tile_keys} if verified[0] else {}
                    refs = {keys: data.reference(ps, keys=keys) for keys in (None, data.span)}
                    runs = {"decode": (None, {}), "decode_verify_tile": (None, tile),
                            "decode_verify_keys": (data.span, {}), "decode_verify_keys_tile": (data.span, tile)}
                    for what, (keys, tuning) in runs.items():
                        timed = time_and_check(functools.partial(data.kit, ps, keys, **tuning), refs[keys], flush, 30)
                        rows.append(_span_row(cell, what, keys or w, *timed))
                    rows.append(_span_row(cell, "verify", w, *verified))
                del data, twin
                torch.cuda.empty_cache()
        (OUT / "verify_span.json").write_text(json.dumps({"rows": rows}, indent=1))
    us = {(r["head_dim"], r["batch"], r["window"], r["page_size"], r["what"]): r.get("us") for r in rows}
    for (d, b, w, ps, what) in us:
        base = us[(d, b, w, ps, "decode")]
        if what == "decode" and base:
            ratios = " ".join(f"{name}/d={us[(d, b, w, ps, name)] / base:.3f}" if us[(d, b, w, ps, name)]
                              else f"{name}: failed" for name in SPAN_ROWS[1:])
            SUMMARY.append(f"span D={d} B={b} W={w} p{ps}: decode {base:.1f}us {ratios}")


VERIFY_PATHS = (("kit_triton_swa", 1), ("kit_triton_swa", 16), ("aiter_triton_unified", 16), ("sdpa_window", None),
                ("flex_attention", None))


def stage_verify_paths() -> None:
    """Each path's chain verify over its own decode, on the same KV (B ``AB_BATCHES``, default 1-128; every head shape
    and window; 8k): the kit at page sizes 1 and 16, aiter's ``unified_attention`` at 16, SDPA over the pre-sliced keys
    some query attends (masked per query in a verify), FlexAttention over the whole context. The verify brings DRAFTS
    queries in every request (the torch paths take one q_len per batch; SGLang's target verify brings as many in each),
    and the kit's ragged verify of the grid is timed beside it. Every output is checked against its float64 reference
    (the torch paths' without sinks: they take none). aiter's kernel loads whole tiles of keys, so a verify's first
    tile reaches the dummy page's NaN (the hazard ``swa_kit.attention.aiter.triton_kernels`` documents): where its output is
    not finite, it is checked again with the dummy page zeroed (``finite_dummy_rel_error``). SDPA's rows name the GPU
    kernels one call launches (which backend ran)."""
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


def stage_grid_order_recheck() -> None:
    """One grid case, every window, 8k: all its paths timed twice in the grid's own order (as ``full`` times them,
    FlexAttention and its failures included), each time followed by the kit's launches alone. A cell that reads slow
    in one grid run but not here belonged to that run. ``RECHECK`` = "B,Hq,Hkv,D" (default: Gemma's B 128)."""
    import torch

    from swa_kit.measure.bench import VERIFY_KEYS_TILE, VERIFY_TILE, DecodeCase, run, timing, verify_twin
    from swa_kit.measure.bench.cases import HEAD_SHAPES
    from swa_kit.measure.bench.paths import DecodeInputs

    b, hq, hkv, d = map(int, os.environ.get("RECHECK", "128,32,16,256").split(","))
    (sinks,) = [s for q, k, dim, s in HEAD_SHAPES.values() if (q, k, dim) == (hq, hkv, d)]
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(9)
    flush = timing.L2Flush(device)
    rows: list[dict] = []
    for rep in range(2):
        for w in (128, 1024, 4096):
            case = DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks)
            result = {"decode": [], "skipped": [], VERIFY_TILE: [], VERIFY_KEYS_TILE: [], "copy_tbs": None}
            run.time_decode_case(result, case, device, gen, flush, 50, False)
            in_order = {f"{r['mode']}@p{r['page_size']}": r["time_ms"] * 1e3 for r in result["decode"]
                        if r["path"] == "kit_triton_swa" and r["time_ms"]}
            data = DecodeInputs(case, device, gen)
            twin = data.with_queries(verify_twin(case))
            alone = {f"{mode}@p{ps}": timing.measure(inputs.kit(ps)[0], flush, 50)["us"]
                     for mode, inputs in (("decode", data), ("verify", twin)) for ps in (1, 16)}
            rows.append({"rep": rep, "batch": b, "hq": hq, "hkv": hkv, "head_dim": d, "window": w,
                         "grid_order_us": in_order, "alone_us": alone,
                         "errors": {r["label"]: r["note"][:120] for r in result["decode"] if not r["time_ms"]}})
            SUMMARY.append(f"recheck rep {rep} W={w}: in grid order {in_order}; alone {alone}")
            del data, twin, result
            torch.cuda.empty_cache()
    (OUT / "grid_order_recheck.json").write_text(json.dumps({"rows": rows}, indent=1))


def stage_tune() -> None:
    """Sweep tiles, warps, stages and the split policy by shape (page size 16, context 8k: time is flat in it)."""
    import torch

    from swa_kit.measure.bench import DecodeCase, timing, verify_twin
    from swa_kit.measure.bench.cases import HEAD_SHAPES

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


STAGES = {"env": stage_env, "ncu": stage_ncu, "ab_flush": stage_ab_flush,
          "tests_kit": stage_tests_kit, "tests": stage_tests, "tune": stage_tune,
          "tune_verify": stage_tune_verify, "ab_merge": stage_ab_merge, "ab_layout": stage_ab_layout,
          "ab_variants": stage_ab_variants, "ab_kv_layout": stage_ab_kv_layout,
          "ab_window_sweep": stage_ab_window_sweep, "verify_span": stage_verify_span,
          "verify_paths": stage_verify_paths,
          "grid_order_recheck": stage_grid_order_recheck,
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
