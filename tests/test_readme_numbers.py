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

from swa_kit import bench
from swa_kit.bench import load_recorded

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
PROSE = " ".join(README.split())  # sentences as one line, wherever the README wraps them
RECORDED = "h200_2026-12-01_v12.json"
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


def test_context_flatness(run):
    limit = re.search(r"the kit at 128k within ([\d.]+)% of 8k in every cell, either way", PROSE).group(1)
    deviations = []
    for long in kit_rows(run, page_size=None, context=128 * 1024):
        case = {**long["case"], "context": 8192}
        (short,) = kit_rows(run, page_size=long["page_size"], **case)
        deviations.append(abs(long["time_ms"] / short["time_ms"] - 1))
    assert len(deviations) == 72 and limit == f"{100 * max(deviations):.1f}"


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
                      r"there, and in three more: GPT-OSS at B 32, W 4096 \(256 MiB\), (\d+)-(\d+)% at page size 16 "
                      r"and ([\d.]+)% at page size 1 and 8k \(([\d.]+)% at 128k\)", PROSE)
    assert found, "the README's bandwidth sentence changed: update this test with it"
    big = [r["copy_fraction"] for r in kit_rows(run, page_size=None) if r["window_bytes"] >= 512 * 2**20]
    assert tuple(map(int, found.groups()[:2])) == (round(100 * min(big)), round(100 * max(big))) and min(big) >= 0.9
    more = [r for r in kit_rows(run, page_size=None) if r["window_bytes"] < 512 * 2**20 and r["copy_fraction"] >= 0.9]
    assert sorted((r["case"]["head_dim"], r["case"]["batch"], r["case"]["window"], r["window_bytes"], r["page_size"],
                   r["case"]["context"]) for r in more) == [(64, 32, 4096, 256 * 2**20, 1, 8192),
                                                            (64, 32, 4096, 256 * 2**20, 16, 8192),
                                                            (64, 32, 4096, 256 * 2**20, 16, 128 * 1024)]
    page_16 = [r["copy_fraction"] for r in more if r["page_size"] == 16]
    assert tuple(map(int, found.groups()[2:4])) == (round(100 * min(page_16)), round(100 * max(page_16)))
    (short,) = kit_rows(run, page_size=1, head_dim=64, batch=32, window=4096, context=8192)
    (long,) = kit_rows(run, page_size=1, head_dim=64, batch=32, window=4096, context=128 * 1024)
    assert found.groups()[4:] == (f"{100 * short['copy_fraction']:.1f}", f"{100 * long['copy_fraction']:.1f}")
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
    found = re.search(r"In every other cell below 512 MiB no path reaches 90% of copy, nor does one read of the same "
                      r"bytes \(a sum: [^)]*\), timed in the same run: ([\d.]+)% of the ceiling at (\d+) MiB and "
                      r"([\d.]+)% at (\d+) MiB", PROSE)
    assert found, "the README's sentence on the cells below 512 MiB changed: update this test with it"
    for share, mib in (found.groups()[:2], found.groups()[2:]):
        assert share == f"{100 * reads[int(mib) * 2**20]:.1f}", mib
    low, high = map(int, re.search(r"At 256 MiB the kit reached (\d+)-(\d+)%", PROSE).groups())
    kit = [r["copy_fraction"] for r in kit_rows(run, page_size=None) if r["window_bytes"] == 256 * 2**20]
    assert (low, high) == (round(100 * min(kit)), round(100 * max(kit)))
    copy = int(re.search(r"A plain copy of the same bytes reached (\d+)% at 256 MiB", PROSE).group(1))
    assert copy == round(100 * copies[256 * 2**20])
    gpt_oss_b32_w4096 = {"head_dim": 64, "batch": 32, "window": 4096}  # the cells the sentence before names
    others = [r["copy_fraction"] for r in run["decode"] if r.get("copy_fraction") and r["window_bytes"] < 512 * 2**20
              and any(r["case"][k] != v for k, v in gpt_oss_b32_w4096.items())]
    assert others and max(others) < 0.9
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
    assert "At B 1 it is within 1.2x of the fastest path in every cell" in PROSE
    assert targets["b1_vs_fastest"]["missed"] == 0 and targets["b1_vs_fastest"]["cells"] == 36
    found = re.search(r"it misses at W 128, for GPT-OSS \(64 query rows per tile\), with 32/8/128 at B 8 \(W 1024 "
                      r"and 4096\), and in one cell of Gemma at B 128 \(W 1024, page size 1, 8k: ([\d.]+)x, where its "
                      r"128k twin took ([\d.]+)x, and the same launch ([\d.]+)x in an A/B after the grid in the same "
                      r"call, `data/bench/tuning/([\w.-]+)`; the same cell missed in v11's recorded run too\)", PROSE)
    assert found, "the README's verify-miss sentence changed: update this test with it"
    misses = targets["verify_over_decode"]["misses"]
    wide_32_8_128 = [m for m in misses if m["head_dim"] == 128 and m["window"] > 128]
    assert {m["batch"] for m in wide_32_8_128} == {8} and {m["window"] for m in wide_32_8_128} == {1024, 4096}
    (gemma,) = [m for m in misses if m["head_dim"] == 256 and m["window"] > 128]
    assert (gemma["batch"], gemma["window"], gemma["page_size"], gemma["context"]) == (128, 1024, 1, 8192)
    assert found.group(1) == f"{gemma['value']:.3f}"
    (twin,) = [g for g in bench.grid_rows(run) if g["page_size"] == 1 and (g["case"]["head_dim"], g["case"]["batch"],
               g["case"]["window"], g["case"]["context"]) == (256, 128, 1024, 131072)]
    assert found.group(2) == f"{twin['verify_over_decode']:.2f}"
    tuning = Path(__file__).resolve().parent.parent / "data" / "bench" / "tuning"
    ab = json.loads((tuning / found.group(4)).read_text())
    assert RECORDED in ab["note"] and "same device call" in ab["note"]
    times = {r["drafts"]: r["us"] for r in ab["rows"] if r["variant"] == "current" and r["page_size"] == 1
             and (r["head_dim"], r["batch"], r["window"]) == (256, 128, 1024)}
    assert found.group(3) == f"{times[8] / times[0]:.2f}"
    earlier = load_recorded(tuning / "h200_2026-12-01_v11_grid.json")
    (before,) = [t for t in earlier["targets"] if t["target"] == "verify_over_decode"]
    assert any((m["head_dim"], m["batch"], m["window"], m["page_size"], m["context"]) == (256, 128, 1024, 1, 8192)
               for m in before["misses"])
    named = {"W 128": lambda m: m["window"] == 128, "GPT-OSS": lambda m: m["head_dim"] == 64,
             "32/8/128 at B 8": lambda m: m in wide_32_8_128, "Gemma's one": lambda m: m is gemma}
    assert all(any(test(m) for test in named.values()) for m in misses)
    assert all(any(test(m) for m in misses) for test in named.values())  # each named cause has a miss


def test_verify_keys_and_tile_sentence(run):
    """The verify against decode over the verify's keys in the verify's query tile, timed beside it in the run."""
    found = re.search(r"A chain of (\d+) queries reads the window and (\d+) keys more, in a taller query tile "
                      r"\(queries x query heads per KV head\); the kit's decode over that many keys in that tile, "
                      r"timed beside each verify, takes over 1.15x decode's time in (\d+) of the (\d+) misses too, "
                      r"and over the cells of B 8-128 the verify takes ([\d.]+)-([\d.]+)x its time \(median "
                      r"([\d.]+)x\), the Gemma cell above aside \(([\d.]+)x\)", PROSE)
    assert found, "the README's keys-and-tile sentence changed: update this test with it"
    assert (int(found.group(1)), int(found.group(2))) == (bench.DRAFTS, bench.DRAFTS - 1)
    (verify,) = [t for t in run["targets"] if t["target"] == "verify_over_decode"]
    assert (int(found.group(3)), int(found.group(4))) == (verify["verify_keys_tile_misses_too"], verify["missed"])
    ratios = {(g["case"]["head_dim"], g["case"]["batch"], g["case"]["window"], g["case"]["context"], g["page_size"]):
              g["verify_over_decode"] / g["verify_keys_tile_over_decode"]
              for g in bench.grid_rows(run) if g["case"]["batch"] > 1}
    assert len(ratios) == 108
    gemma = ratios.pop((256, 128, 1024, 8192, 1))  # the cell the sentence before names
    assert found.group(8) == f"{gemma:.2f}" and max(ratios.values()) < gemma
    values = list(ratios.values())
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
                                   r"or more \(`data/bench/tuning/h200_2026-12-01_ab_flush.json`\)", PROSE).groups())
    rows = json.loads((Path(__file__).resolve().parent.parent / "data" / "bench" / "tuning"
                       / "h200_2026-12-01_ab_flush.json").read_text())["rows"]
    by = {}
    for r in rows:
        by.setdefault((r["head_dim"], r["batch"], r["window"]), {})[r["flush"]] = r
    extra = [c["write"]["kit"] - c["read"]["kit"] for c in by.values() if c["write"]["bytes"] >= 64 * 2**20]
    assert len(extra) == 19 and (low, high) == (round(min(extra)), round(max(extra)))
