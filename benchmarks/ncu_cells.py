"""Hardware counters of the kit's kernel on the grid cells that miss their targets, beside cells that meet them.

    python3 benchmarks/ncu_cells.py            (on the device machine: runs itself under Nsight Compute)

Each cell's decode (and, where CELLS asks for it, the verify over the same KV) runs once inside a
``cudaProfilerStart/Stop`` region, after a warm-up that compiled it; a read-only stream of the same
bytes (``torch.sum`` over a contiguous bf16 buffer) follows each decode, as the streaming ceiling that a
reader of those bytes can reach. Nsight Compute flushes and invalidates the caches before every replay
pass (clean lines, as the benchmark's reading flush leaves) and leaves the clocks alone
(``--clock-control none``). What it reads per kernel: time, DRAM bytes and throughput, achieved occupancy
and what limits it, how long the busiest and the average SM were active (a tail shows as their gap), the
warps' stall reasons, the instructions one warp issues, and each pipe's share of its peak. The parsed table
goes to ``$OUT/ncu_cells.json``; the raw report to ``$OUT/ncu_cells.ncu-rep``.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ.get("OUT", ROOT / "gpu-out"))

# (B, Hq, Hkv, D, W, sinks, verify too): the bandwidth misses at 256 MiB (GPT-OSS B 32 W 4096 and B 128
# W 1024, Gemma B 128 W 128), the same shapes where they meet 90% (controls), and verify misses of each
# kind beside a verify that meets 1.15x (32/8/128 B 32 W 4096); the last three are W 128 verify misses at B 8-32.
CELLS = (
    (32, 64, 8, 64, 4096, True, False), (128, 64, 8, 64, 1024, True, True), (128, 32, 16, 256, 128, False, True),
    (128, 64, 8, 64, 4096, True, True), (32, 32, 16, 256, 4096, False, False), (32, 32, 8, 128, 4096, False, True),
    (128, 32, 8, 128, 1024, False, True), (128, 32, 8, 128, 128, False, True),
    (8, 32, 8, 128, 128, False, True), (8, 32, 8, 128, 1024, False, True), (8, 64, 8, 64, 4096, True, True),
    (128, 64, 8, 64, 128, True, True), (32, 32, 8, 128, 128, False, True), (32, 32, 16, 256, 128, False, True),
    (8, 64, 8, 64, 128, True, True),
)
KERNELS = ("_swa_attend_kernel", "reduce_kernel")

# Raw counters read per kernel (Hopper names); the sections below add the stall reasons.
METRICS = (
    "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct", "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps", "launch__registers_per_thread",
    "launch__grid_size", "launch__waves_per_multiprocessor", "sm__cycles_active.avg", "sm__cycles_active.max",
    "sm__cycles_elapsed.max", "lts__t_sector_hit_rate.pct", "smsp__inst_executed.sum", "smsp__warps_launched.sum",
)
# Read from the sections' rows (not requested by name: a name this ncu lacks would stop it).
FROM_SECTIONS = ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats", "ComputeWorkloadAnalysis", "InstructionStats")
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"


def child() -> None:
    """Build every cell, compile and warm each kernel, then run them once each inside the profiled region."""
    import torch

    from swa_kit.measure.bench import DecodeCase, verify_twin
    from swa_kit.measure.bench.paths import DecodeInputs

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(11)
    launches, order = [], []
    for b, hq, hkv, d, w, sinks, with_verify in CELLS:
        case = DecodeCase(b, hq, hkv, d, 8192, w, sinks=sinks)
        data = DecodeInputs(case, device, gen)
        stream = torch.randn(case.window_bytes // 2, device=device, dtype=torch.bfloat16, generator=gen)
        label = f"B{b} {hq}/{hkv}/{d} W{w}"
        fn, _, facts = data.kit(16)
        launches.append(fn)
        order.append({"kernel": KERNELS[0], "cell": label, "mode": "decode", "least_bytes": case.least_bytes,
                      **facts})
        launches.append(lambda stream=stream: stream.sum(dtype=torch.float32))
        order.append({"kernel": KERNELS[1], "cell": label, "mode": "stream", "least_bytes": case.window_bytes})
        if with_verify:
            twin = verify_twin(case)
            fn, _, facts = data.with_queries(twin).kit(16)
            launches.append(fn)
            order.append({"kernel": KERNELS[0], "cell": label, "mode": "verify", "least_bytes": twin.least_bytes,
                          **facts})
    for fn in launches:
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for fn in launches:
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    (OUT / "ncu_order.json").write_text(json.dumps(order))


def _ncu() -> str:
    found = shutil.which("ncu") or next(iter(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))), None)
    if found is None:
        raise SystemExit("ncu (Nsight Compute) not found on PATH or under /opt/nvidia/nsight-compute")
    return found


def _raw_rows(ncu: str, report: Path) -> list[dict[str, str]]:
    text = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"],
                          capture_output=True, text=True, check=True).stdout
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    return rows[1:]  # the first row under the header holds the units


def _number(row: dict[str, str], name: str) -> float | None:
    value = row.get(name, "").replace(",", "")
    try:
        return float(value)
    except ValueError:
        return None


def summarise(row: dict[str, str], meta: dict) -> dict:
    """One kernel's counters, named for the notes: time, DRAM bytes over the least bytes, occupancy, tail, stalls."""
    out = {**meta, "kernel_name": row.get("Kernel Name", "")}
    for name in (*METRICS, *FROM_SECTIONS):
        out[name] = _number(row, name)
    stalls = {k[len(STALL_PREFIX):-len(STALL_SUFFIX)]: _number(row, k) for k in row
              if k.startswith(STALL_PREFIX) and k.endswith(STALL_SUFFIX) and "not_issued" not in k}
    out["stalls_per_issue"] = dict(sorted(((k, v) for k, v in stalls.items() if v), key=lambda kv: -kv[1])[:6])
    dram = (out["dram__bytes_read.sum"] or 0) + (out["dram__bytes_write.sum"] or 0)
    out["dram_over_least"] = dram / meta["least_bytes"] if meta.get("least_bytes") else None
    if out["smsp__inst_executed.sum"] and out["smsp__warps_launched.sum"]:  # what one warp issues, on average
        out["instructions_per_warp"] = out["smsp__inst_executed.sum"] / out["smsp__warps_launched.sum"]
    if out["sm__cycles_active.avg"] and out["sm__cycles_elapsed.max"]:
        out["sm_active_avg_of_elapsed"] = out["sm__cycles_active.avg"] / out["sm__cycles_elapsed.max"]
    out["pipes_pct_of_peak"] = {k.split("__", 1)[1].split(".")[0]: v for k in row if "pipe" in k and k.endswith(
        "pct_of_peak_sustained_active") and (v := _number(row, k))}  # every pipe's share, for the notes to read
    return out


# The printed table's columns: (heading, key in a summarised row, scale, width, decimals).
COLUMNS = (("us", "gpu__time_duration.sum", 1e-3, 8, 1), ("dram/least", "dram_over_least", 1, 11, 3),
           ("dram %pk", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", 1, 9, 1),
           ("occ %", "sm__warps_active.avg.pct_of_peak_sustained_active", 1, 7, 1),
           ("theo %", "sm__maximum_warps_per_active_cycle_pct", 1, 7, 1),
           ("act/el", "sm_active_avg_of_elapsed", 1, 7, 2), ("waves", "launch__waves_per_multiprocessor", 1, 7, 2),
           ("sm %", FROM_SECTIONS[0], 1, 6, 0), ("inst/warp", "instructions_per_warp", 1, 10, 0))


def table_numbers(row: dict) -> str:
    """One summarised row's numbers under COLUMNS; a counter ncu did not report shows as '-', never as 0."""
    return "".join(f"{row[key] * scale:>{w}.{p}f}" if row.get(key) is not None else f"{'-':>{w}}"
                   for _, key, scale, w, p in COLUMNS)


def parent() -> int:
    ncu = _ncu()
    OUT.mkdir(parents=True, exist_ok=True)
    report = OUT / "ncu_cells"
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
           "--kernel-name", f"regex:{'|'.join(KERNELS)}", "--metrics", ",".join(METRICS),
           *[arg for s in SECTIONS for arg in ("--section", s)], "-o", str(report), "-f",
           sys.executable, __file__, "child"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    (OUT / "ncu_cells.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode:
        print(f"ncu failed (rc {proc.returncode}); the tail of its log:\n{(proc.stdout + proc.stderr)[-3000:]}")
        return proc.returncode
    order = json.loads((OUT / "ncu_order.json").read_text())
    rows = iter(_raw_rows(ncu, report.with_suffix(".ncu-rep")))
    table = []
    for meta in order:  # in launch order; a library kernel launched beside the one expected is passed over
        row = next((r for r in rows if meta["kernel"] in r.get("Kernel Name", "")), None)
        if row is None:
            print(f"ncu's report ends before {meta['kernel']} of {meta['cell']} ({meta['mode']})")
            return 1
        table.append(summarise(row, meta))
    (OUT / "ncu_cells.json").write_text(json.dumps(table, indent=1))
    print(f"{'cell':<24}{'mode':<8}" + "".join(f"{h:>{w}}" for h, _, _, w, _ in COLUMNS) + "  top stalls")
    for r in table:
        numbers = table_numbers(r)
        stalls = " ".join(f"{k}={v:.1f}" for k, v in list(r["stalls_per_issue"].items())[:3])
        pipes = " ".join(f"{k}={v:.0f}%" for k, v in sorted(r["pipes_pct_of_peak"].items(), key=lambda kv: -kv[1])[:3])
        print(f"{r['cell']:<24}{r['mode']:<8}{numbers}  {stalls} | {pipes}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["child"]:
        child()
    else:
        raise SystemExit(parent())
