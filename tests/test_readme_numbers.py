"""The README's performance figures against the recorded run they quote (data/bench/), so they cannot drift.

Each figure is read out of README.md with a pattern and recomputed from the recorded JSON's rows; a changed
recording or an edited number fails here until both agree again.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from swa_kit.measure import bench
from swa_kit.measure.bench import load_recorded
from swa_kit.measure.bench.verify_paths import VERIFY_PATHS_RECORD

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
PROSE = " ".join(README.split())  # sentences as one line, wherever the README wraps them
RECORDED = "h200_2026-12-01_v13.json"
TABLE_ROW = re.compile(r"^\| (?:([^|:]+): )?W (\d+), B (\d+), (\d+)/(\d+)/(\d+) \| ([\d.]+) us \| (\d+)% \| "
                       r"([\d.]+)x \| ([\d.]+)x \| ([\d.]+)x \|$", re.M)


@pytest.fixture(scope="module")
def run() -> dict:
    assert f"`data/bench/{RECORDED}`" in README
    return load_recorded(Path(__file__).resolve().parent.parent / "data" / "bench" / RECORDED)


def kit_rows(run: dict, page_size: int | None = 16, **case) -> list[dict]:
    return [r for r in run["decode"] if r["path"] == "kit_triton_swa" and r.get("time_ms")
            and r["case"]["drafts"] == 0 and (page_size is None or r["page_size"] == page_size)
            and all(r["case"][k] == v for k, v in case.items())]


def test_performance_table(run):
    rows = TABLE_ROW.findall(README)
    assert len(rows) == 5
    for name, window, batch, hq, hkv, dim, us, copy, sdpa, flex, aiter in rows:
        case = {"window": int(window), "batch": int(batch), "hq": int(hq), "hkv": int(hkv), "head_dim": int(dim),
                "sinks": "sinks" in name}
        (row,) = kit_rows(run, context=8192, **case)
        assert us == f"{row['time_ms'] * 1e3:.1f}", case
        assert int(copy) == round(100 * row["copy_fraction"]), case
        ratios = row["ratios"]
        assert (sdpa, flex, aiter) == tuple(f"{ratios[k]:.2f}" for k in
                                            ("sdpa_window", "flex_attention", "aiter_triton_unified@p16")), case


def disturbed(row: dict) -> bool:
    """The two kit cells the README calls disturbed: GPT-OSS decode at B 1, W 128, 8k (both page sizes)."""
    case = row["case"]
    return (case["head_dim"], case["batch"], case["window"], case["context"], case["drafts"]) == (64, 1, 128, 8192, 0)


def test_context_flatness(run):
    limit = re.search(r"the kit at 128k within ([\d.]+)% of 8k in every cell, either way, but the two whose 8k "
                      r"replays were disturbed", PROSE).group(1)
    deviations = []
    for long in kit_rows(run, page_size=None, context=128 * 1024):
        case = {**long["case"], "context": 8192}
        (short,) = kit_rows(run, page_size=long["page_size"], **case)
        if not disturbed(short):
            deviations.append(abs(long["time_ms"] / short["time_ms"] - 1))
    assert len(deviations) == 70 and limit == f"{100 * max(deviations):.1f}"


def test_conditions_of_the_run(run):
    copy = re.search(r"the copy ceiling \(([\d.]+) TB/s", PROSE).group(1)
    assert copy == f"{run['copy_tbs']:.2f}"
    torch_v, triton_v = re.search(r"NVIDIA H200 \(torch ([\d.]+), Triton ([\d.]+)\)", PROSE).groups()
    assert run["versions"]["torch"].startswith(torch_v + ".") and run["versions"]["triton"].startswith(triton_v + ".")
    assert run["versions"]["amd-aiter"].startswith("0.1.7") and "aiter 0.1.7" in PROSE
    launch = re.search(r"\(([\d.]+) us of it the launch itself\)", PROSE).group(1)
    assert launch == f"{run['launch_floor']['us']:.1f}"


def test_grid_ranges(run):
    found = re.search(r"reaches (\d+)-(\d+)% of copy from 512 MiB of window up, so the 90% target holds in every cell "
                      r"there. Below 512 MiB GPT-OSS at B 32, W 4096 \(256 MiB\) comes closest, ([\d.]+)-([\d.]+)% "
                      r"\(([\d.]+)-(\d+)% in the run before, with the same decode code", PROSE)
    assert found, "the README's bandwidth sentence changed: update this test with it"
    big = [r["copy_fraction"] for r in kit_rows(run, page_size=None) if r["window_bytes"] >= 512 * 2**20]
    assert tuple(map(int, found.groups()[:2])) == (round(100 * min(big)), round(100 * max(big))) and min(big) >= 0.9
    small = [r for r in kit_rows(run, page_size=None) if r["window_bytes"] < 512 * 2**20]
    closest = max(small, key=lambda r: r["copy_fraction"])
    assert (closest["case"]["head_dim"], closest["case"]["batch"], closest["case"]["window"]) == (64, 32, 4096)
    gpt_oss = [r["copy_fraction"] for r in small if (r["case"]["head_dim"], r["case"]["batch"], r["case"]["window"])
               == (64, 32, 4096)]
    assert len(gpt_oss) == 4 and found.groups()[2:4] == (f"{100 * min(gpt_oss):.1f}", f"{100 * max(gpt_oss):.1f}")
    before = load_recorded(Path(__file__).resolve().parent.parent / "records" / "tuning"
                           / "h200_2026-12-01_v12_grid.json")
    earlier = [r["copy_fraction"] for r in kit_rows(before, page_size=None, head_dim=64, batch=32, window=4096)]
    assert len(earlier) == 4 and found.groups()[4:] == (f"{100 * min(earlier):.1f}", f"{round(100 * max(earlier))}")
    text = re.search(r"Over the decode cells of B 8-128 \(B 1 is judged on its own\) it is ([\d.]+)-([\d.]+)x SDPA "
                     r"\(median ([\d.]+)x\), ([\d.]+)-([\d.]+)x FlexAttention, ([\d.]+)-([\d.]+)x aiter", PROSE)
    assert text, "the README's range sentence changed: update this test with it"
    rows = [r for r in kit_rows(run, page_size=None) if r["case"]["batch"] > 1]
    assert {r["case"]["batch"] for r in rows} == {8, 32, 128}

    def spread(label):
        values = [r["ratios"][label] for r in rows if label in r["ratios"]]
        return min(values), max(values), statistics.median(values)

    sdpa, flex, aiter = spread("sdpa_window"), spread("flex_attention"), spread("aiter_triton_unified@p16")
    assert text.groups()[:3] == tuple(f"{v:.2f}" for v in sdpa)
    assert text.groups()[3:5] == tuple(f"{v:.2f}" for v in flex[:2])
    assert float(text.group(6)) == round(aiter[0], 2) and float(text.group(7)) == round(aiter[1], 1)


def test_figure_caption(run):
    full, dense, times_full, times_dense, kit = re.search(
        r"full attention \((\d+) us\) and a dense mask \((\d+) us\) were timed at 8k only in this run, where they "
        r"already take ([\d.]+)x and ([\d.]+)x the kit's (\d+) us", PROSE).groups()
    (row,) = kit_rows(run, context=8192, window=4096, batch=32, hq=32, hkv=8, head_dim=128, sinks=False)
    others = {r["label"]: r["time_ms"] * 1e3 for r in run["decode"] if r["case"] == row["case"]}
    assert (int(full), int(dense), int(kit)) == (round(others["sdpa_full"]), round(others["sdpa_dense_mask"]),
                                                 round(row["time_ms"] * 1e3))
    assert (times_full, times_dense) == (f"{row['ratios']['sdpa_full']:.1f}", f"{row['ratios']['sdpa_dense_mask']:.1f}")


def test_fixed_cost_and_verify_sentences(run):
    reads = {c["bytes"]: c["tbs"] / run["copy_tbs"] for c in run["read_same_bytes"]}
    copies = {c["bytes"]: c["tbs"] / run["copy_tbs"] for c in run["copy_same_bytes"]}
    found = re.search(r"In no cell below 512 MiB does any path reach 90% of copy, nor does one read of the same bytes "
                      r"\(a sum: [^)]*\), timed in the same run: ([\d.]+)% of the ceiling at (\d+) MiB and "
                      r"([\d.]+)% at (\d+) MiB", PROSE)
    assert found, "the README's sentence on the cells below 512 MiB changed: update this test with it"
    for share, mib in (found.groups()[:2], found.groups()[2:]):
        assert share == f"{100 * reads[int(mib) * 2**20]:.1f}", mib
    low, high = map(int, re.search(r"At 256 MiB the kit reached (\d+)-(\d+)%", PROSE).groups())
    kit = [r["copy_fraction"] for r in kit_rows(run, page_size=None) if r["window_bytes"] == 256 * 2**20]
    assert (low, high) == (round(100 * min(kit)), round(100 * max(kit)))
    copy = int(re.search(r"A plain copy of the same bytes reached (\d+)% at 256 MiB", PROSE).group(1))
    assert copy == round(100 * copies[256 * 2**20])
    small = [r["copy_fraction"] for r in run["decode"] if r.get("copy_fraction") and r["window_bytes"] < 512 * 2**20]
    assert small and max(small) < 0.9
    assert max(share for nbytes, share in reads.items() if nbytes < 512 * 2**20) < 0.9
    met, cells = map(int, re.search(r"within 1.15x of decode over the same KV in (\d+) of (\d+) cells", PROSE).groups())
    (verify,) = [t for t in run["targets"] if t["target"] == "verify_over_decode"]
    assert (met, cells) == (verify["cells"] - verify["missed"], verify["cells"])
    p1, p16 = re.search(r"\(([\d.]+)x at page size 1 and ([\d.]+)x at 16 at the first shape above\)", PROSE).groups()
    first = {g["page_size"]: g for g in bench.grid_rows(run) if g["case"]["context"] == 8192 and
             (g["case"]["batch"], g["case"]["head_dim"], g["case"]["window"], g["case"]["hkv"]) == (32, 128, 4096, 8)}
    assert (p1, p16) == (f"{first[1]['verify_over_decode']:.2f}", f"{first[16]['verify_over_decode']:.2f}")


def test_b1_and_verify_miss_sentences(run):
    targets = {t["target"]: t for t in run["targets"]}
    b1 = targets["b1_vs_fastest"]
    met, cells = map(int, re.search(r"At B 1 it is within 1.2x of the fastest path in (\d+) of (\d+) cells",
                                    PROSE).groups())
    assert (met, cells) == (b1["cells"] - b1["missed"], b1["cells"])
    found = re.search(r"The 36th, GPT-OSS at W 128, page size 16, 8k, took ([\d.]+) us, its 50 replays spread over "
                      r"([\d.]+)-([\d.]+) us \(p10-p90\) where every other kit launch timed in the run kept its p90 "
                      r"within ([\d.]+)x of its p10: a disturbed measurement, like its page-size-1 twin's "
                      r"\(([\d.]+) us, ([\d.]+)-([\d.]+) us\)\. Their 128k twins took ([\d.]+) and ([\d.]+) us, and "
                      r"the same launches ([\d.]+) and ([\d.]+) us in a later call \(`records/tuning/([\w.-]+)`\)",
                      PROSE)
    assert found, "the README's B 1 sentence changed: update this test with it"
    (miss,) = b1["misses"]
    assert (miss["head_dim"], miss["window"], miss["page_size"], miss["context"]) == (64, 128, 16, 8192)
    kit = [r for r in run["decode"] if r["path"] == "kit_triton_swa" and r.get("time_ms")]
    cells = {r["page_size"]: r for r in kit if disturbed(r)}
    assert sorted(cells) == [1, 16]
    for row, (us, p10, p90) in ((cells[16], found.groups()[:3]), (cells[1], found.groups()[4:7])):
        assert (us, p10, p90) == (f"{row['time_ms'] * 1e3:.1f}", f"{row['p10_us']:.1f}", f"{row['p90_us']:.1f}")
    spread = max(r["p90_us"] / r["p10_us"] for r in kit if not disturbed(r))
    assert found.group(4) == f"{spread:.2f}" and min(r["p90_us"] / r["p10_us"] for r in cells.values()) > 2 * spread
    for ps, text in ((16, found.group(8)), (1, found.group(9))):
        (twin,) = kit_rows(run, page_size=ps, head_dim=64, batch=1, window=128, context=128 * 1024)
        assert text == f"{twin['time_ms'] * 1e3:.1f}"
    recheck = json.loads((Path(__file__).resolve().parent.parent / "records" / "tuning"
                          / found.group(12)).read_text())
    assert RECORDED in recheck["note"]
    later = {r["page_size"]: r["us"] for r in recheck["rows"] if r["variant"] == "current" and r["drafts"] == 0
             and (r["head_dim"], r["batch"], r["window"]) == (64, 1, 128)}
    assert (found.group(10), found.group(11)) == (f"{later[16]:.2f}", f"{later[1]:.2f}")
    found = re.search(r"it misses at W 128 \((\d+) cells: 32/8/128 at B 8-128, Gemma and GPT-OSS at B 128\) and with "
                      r"32/8/128 at B 8, W 1024 \((\d+) cells\)", PROSE)
    assert found, "the README's verify-miss sentence changed: update this test with it"
    misses = targets["verify_over_decode"]["misses"]
    narrow = [m for m in misses if m["window"] == 128]
    assert int(found.group(1)) == len(narrow) and int(found.group(2)) == len(misses) - len(narrow)
    assert {m["batch"] for m in narrow if m["head_dim"] == 128} == {8, 32, 128}
    assert {m["batch"] for m in narrow if m["head_dim"] != 128} == {128}
    assert all((m["head_dim"], m["batch"], m["window"]) == (128, 8, 1024) for m in misses if m["window"] > 128)


def test_verify_keys_and_tile_sentence(run):
    """The verify against decode over the verify's keys in the verify's query tile, timed beside it in the run."""
    found = re.search(r"A chain of (\d+) queries reads the window and (\d+) keys more, in a taller query tile "
                      r"\(queries x query heads per KV head\); the kit's decode over that many keys in that tile, "
                      r"timed beside each verify, takes over 1.15x decode's time in (\d+) of the (\d+) misses too, "
                      r"and over the cells of B 8-128 the verify takes ([\d.]+)-([\d.]+)x its time \(median "
                      r"([\d.]+)x\): a verify costs what", PROSE)
    assert found, "the README's keys-and-tile sentence changed: update this test with it"
    assert (int(found.group(1)), int(found.group(2))) == (bench.DRAFTS, bench.DRAFTS - 1)
    (verify,) = [t for t in run["targets"] if t["target"] == "verify_over_decode"]
    assert (int(found.group(3)), int(found.group(4))) == (verify["verify_keys_tile_misses_too"], verify["missed"])
    values = [g["verify_over_decode"] / g["verify_keys_tile_over_decode"] for g in bench.grid_rows(run)
              if g["case"]["batch"] > 1]
    assert len(values) == 108
    assert found.groups()[4:7] == (f"{min(values):.2f}", f"{max(values):.2f}", f"{statistics.median(values):.2f}")


def test_verify_traffic_sentence(run):
    found = re.search(r"In (\d+) of those misses the verify must move over 1.15x decode's bytes, its drafts' queries "
                      r"and outputs beside a short window \(([\d.]+)-([\d.]+)x\)", PROSE)
    assert found, "the README's verify-traffic sentence changed: update this test with it"
    (verify,) = [t for t in run["targets"] if t["target"] == "verify_over_decode"]
    over = [m["verify_bytes_over_decode"] for m in verify["misses"] if m["verify_bytes_over_decode"] > 1.15]
    assert int(found.group(1)) == verify["verify_bytes_misses_too"] == len(over)
    assert (found.group(2), found.group(3)) == (f"{min(over):.2f}", f"{max(over):.2f}")
    assert all(m["window"] == 128 for m in verify["misses"] if m["verify_bytes_over_decode"] > 1.15)  # "short"


def test_flush_sentence(run):
    """The run flushed L2 by reading; the cost the zeroing flush put on the kit comes from its recorded A/B."""
    assert run["settings"]["flush_by"] == "read" and "flushed by reading a separate 512 MiB buffer" in PROSE
    low, high = map(int, re.search(r"paid for writing it back: (\d+)-(\d+) us for the kit wherever it read 64 MiB "
                                   r"or more \(`records/tuning/h200_2026-12-01_ab_flush.json`\)", PROSE).groups())
    rows = json.loads((Path(__file__).resolve().parent.parent / "records" / "tuning"
                       / "h200_2026-12-01_ab_flush.json").read_text())["rows"]
    by = {}
    for r in rows:
        by.setdefault((r["head_dim"], r["batch"], r["window"]), {})[r["flush"]] = r
    extra = [c["write"]["kit"] - c["read"]["kit"] for c in by.values() if c["write"]["bytes"] >= 64 * 2**20]
    assert len(extra) == 19 and (low, high) == (round(min(extra)), round(max(extra)))


def test_verify_across_paths_sentence():
    """The kit's verify against every other path's, recomputed from the stage's record."""
    found = re.search(r"`data/bench/verify_paths/h200_2026-12-02_v13.json`\), the kit's verify was the fastest verify in every cell, "
                      r"B 1-128 at 8k; at B 8-128 the next fastest \(FlexAttention or aiter\) took ([\d.]+)-([\d.]+)x "
                      r"its time at page size 1", PROSE)
    assert found, "the README's sentence on every path's verify changed: update this test with it"
    rows = json.loads(VERIFY_PATHS_RECORD.read_text())["rows"]
    verify = {}
    for r in rows:
        if r["mode"] == "verify" and r["us"]:
            verify.setdefault((r["head_dim"], r["batch"], r["window"]), {})[(r["path"], r["page_size"])] = r["us"]
    assert len(verify) == 36
    next_fastest = {}
    for cell, times in verify.items():
        kit = times.pop(("kit_triton_swa", 1))
        times.pop(("kit_triton_swa", 16))
        (best_us, best_path) = min((us, path) for (path, _), us in times.items())
        assert best_us > kit, cell
        if cell[1] >= 8:
            next_fastest[cell] = (best_us / kit, best_path)
    assert {path for _, path in next_fastest.values()} == {"flex_attention", "aiter_triton_unified"}
    ratios = [ratio for ratio, _ in next_fastest.values()]
    assert found.groups() == (f"{min(ratios):.2f}", f"{max(ratios):.2f}")
