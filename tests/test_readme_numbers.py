"""The README's numbers against the records and the library that produce them, so they cannot drift.

Each number is read out of README.md with a pattern and recomputed: the performance section's from the recorded
runs it quotes (data/bench/), the picture captions and counts from the library and the repository. A changed
recording or an edited number fails here until both agree again; a sentence reworded past its pattern fails too,
naming itself: reword the pattern with it.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from swa_kit.measure import bench
from swa_kit.measure.bench import load_recorded
from swa_kit.measure.bench.results import verify_drafts
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
    found = re.search(r"Decode, (\w+), (\d+)k context, page size (\d+); ratios are", PROSE)
    assert found, "the sentence that says what the table holds changed: update this test with it"
    dtype, context, page_size = found.group(1), int(found.group(2)) * 1024, int(found.group(3))
    rows = TABLE_ROW.findall(README)
    assert len(rows) == 5
    for name, window, batch, hq, hkv, dim, us, copy, sdpa, flex, aiter in rows:
        case = {"window": int(window), "batch": int(batch), "hq": int(hq), "hkv": int(hkv), "head_dim": int(dim),
                "sinks": "sinks" in name}
        (row,) = kit_rows(run, page_size=page_size, context=context, **case)
        assert {"bf16": "bfloat16"}.get(dtype) == row["case"]["dtype"], case
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
    limit = re.search(r"the kit's time at 128k is within ([\d.]+)% of its time at 8k in every cell but (\w+) disturbed "
                      r"8k measurements", PROSE)
    assert limit, "the README's flatness sentence changed: update this test with it"
    deviations, disturbed_cells = [], 0
    for long in kit_rows(run, page_size=None, context=128 * 1024):
        case = {**long["case"], "context": 8192}
        (short,) = kit_rows(run, page_size=long["page_size"], **case)
        if disturbed(short):
            disturbed_cells += 1
        else:
            deviations.append(abs(long["time_ms"] / short["time_ms"] - 1))
    assert len(deviations) == 70 and limit.group(1) == f"{100 * max(deviations):.1f}"
    assert limit.group(2) == {2: "two"}.get(disturbed_cells)


def test_conditions_of_the_run(run):
    copy = re.search(r"the copy ceiling \(([\d.]+) TB/s", PROSE).group(1)
    assert copy == f"{run['copy_tbs']:.2f}"
    torch_v, triton_v = re.search(r"NVIDIA H200 \(torch ([\d.]+), Triton ([\d.]+)\)", PROSE).groups()
    assert run["versions"]["torch"].startswith(torch_v + ".") and run["versions"]["triton"].startswith(triton_v + ".")
    assert run["versions"]["amd-aiter"].startswith("0.1.7") and "aiter 0.1.7" in PROSE
    flush, reps = map(int, re.search(r"with L2 flushed by reading a separate (\d+) MiB buffer, the median of (\d+) "
                                     r"replays", PROSE).groups())
    settings = run["settings"]
    assert settings["flush_by"] == "read" and (flush * 2**20, reps) == (settings["flush_bytes"], settings["reps"])
    assert run["machine"]["gpu"] == "NVIDIA H200" and run["date"].startswith("2026-12-01")
    assert "benchmarks/gpu_run.py" in run["command"] and "full" in run["command"].split()


def test_grid_sentence(run):
    found = re.search(r"Over the whole grid \(B (\d+)-(\d+), (\w+) head shapes, W (\d+)-(\d+), 8k and 128k, page "
                      r"sizes 1 and 16\)", PROSE)
    assert found, "the README's grid sentence changed: update this test with it"
    cases = [r["case"] for r in kit_rows(run, page_size=None)]
    batches, windows = sorted({c["batch"] for c in cases}), sorted({c["window"] for c in cases})
    shapes = {(c["hq"], c["hkv"], c["head_dim"]) for c in cases}
    assert tuple(map(int, found.group(1, 2))) == (batches[0], batches[-1])
    assert tuple(map(int, found.group(4, 5))) == (windows[0], windows[-1])
    assert found.group(3) == {3: "three"}.get(len(shapes))
    assert {c["context"] for c in cases} == {8192, 128 * 1024}
    assert {r["page_size"] for r in kit_rows(run, page_size=None)} == {1, 16}


def test_bandwidth_sentence(run):
    found = re.search(r"from 512 MiB of window up it reaches (\d+)-(\d+)% of copy; below that no path reaches 90%, nor "
                      r"does one read of the same bytes \(([\d.]+)% of the ceiling at (\d+) MiB\)", PROSE)
    assert found, "the README's bandwidth sentence changed: update this test with it"
    big = [r["copy_fraction"] for r in kit_rows(run, page_size=None) if r["window_bytes"] >= 512 * 2**20]
    assert tuple(map(int, found.groups()[:2])) == (round(100 * min(big)), round(100 * max(big)))
    small = [r["copy_fraction"] for r in run["decode"] if r.get("copy_fraction") and r["window_bytes"] < 512 * 2**20]
    assert small and max(small) < 0.9
    reads = {c["bytes"]: c["tbs"] / run["copy_tbs"] for c in run["read_same_bytes"]}
    assert found.group(3) == f"{100 * reads[int(found.group(4)) * 2**20]:.1f}"
    assert max(share for nbytes, share in reads.items() if nbytes < 512 * 2**20) < 0.9


def test_ranges_sentence(run):
    text = re.search(r"over B 8-128 it is ([\d.]+)-([\d.]+)x SDPA \(median ([\d.]+)x\), ([\d.]+)-([\d.]+)x "
                     r"FlexAttention and ([\d.]+)-([\d.]+)x aiter; at B 1 it is within 1.2x of the fastest path in "
                     r"(\d+) of (\d+) cells", PROSE)
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
    (b1,) = [t for t in run["targets"] if t["target"] == "b1_vs_fastest"]
    assert (int(text.group(8)), int(text.group(9))) == (b1["cells"] - b1["missed"], b1["cells"])


def test_verify_over_decode_sentence(run):
    found = re.search(r"a chain verify of (\d+)-(\d+) drafts stays within 1.15x of decode over the same KV in (\d+) of "
                      r"(\d+) cells", PROSE)
    assert found, "the README's verify sentence changed: update this test with it"
    (widest,) = kit_rows(run, context=8192, window=4096, batch=128, hq=32, hkv=8, head_dim=128, sinks=False)
    chains = bench.verify_twin(bench.DecodeCase(**widest["case"])).q_lens()
    assert (int(found.group(1)), int(found.group(2))) == (min(chains), max(chains))
    assert max(chains) == verify_drafts(run)
    (verify,) = [t for t in run["targets"] if t["target"] == "verify_over_decode"]
    assert (int(found.group(3)), int(found.group(4))) == (verify["cells"] - verify["missed"], verify["cells"])


def test_figure_caption(run):
    found = re.search(r"Decode time against context at W = (\d+), B (\d+): the kit, SDPA over the window slice and "
                      r"aiter, timed at (\d+)k and (\d+)k keys, stay flat; FlexAttention, full attention \((\d+) us\) "
                      r"and a dense mask \((\d+) us\) were timed at (\d+)k only, where the last two already take "
                      r"([\d.]+)x and ([\d.]+)x the kit's (\d+) us", PROSE)
    assert found, "the README's figure caption changed: update this test with it"
    window, batch, short, long, full, dense, only, times_full, times_dense, kit = found.groups()
    assert (int(window), int(batch)) == (bench.HEADLINE["window"], bench.HEADLINE["batch"])
    assert int(short) == int(only) == 8 and int(long) == 128
    headline = {**bench.HEADLINE, "sinks": False}
    rows = [r for r in run["decode"] if r.get("time_ms") and r["case"]["drafts"] == 0
            and all(r["case"][k] == v for k, v in headline.items())]
    times = {}
    for r in rows:
        times.setdefault(r["path"], {}).setdefault(r["page_size"], {})[r["case"]["context"] // 1024] = r["time_ms"]
    both = {path for path, by_page in times.items() if all(set(t) == {8, 128} for t in by_page.values())}
    assert both == {"kit_triton_swa", "sdpa_window", "aiter_triton_unified"}
    assert set(times) - both == {"flex_attention", "sdpa_full", "sdpa_dense_mask"}
    assert all(set(t) == {8} for path in set(times) - both for t in times[path].values())
    assert all(abs(t[128] / t[8] - 1) < 0.01 for path in both for t in times[path].values())  # flat
    (row,) = kit_rows(run, context=8192, **headline)
    others = {r["label"]: r["time_ms"] * 1e3 for r in rows if r["case"] == row["case"]}
    assert (int(full), int(dense), int(kit)) == (round(others["sdpa_full"]), round(others["sdpa_dense_mask"]),
                                                 round(row["time_ms"] * 1e3))
    assert (times_full, times_dense) == (f"{row['ratios']['sdpa_full']:.1f}", f"{row['ratios']['sdpa_dense_mask']:.1f}")


def test_the_machine_and_date_named(run):
    section = README[README.index("## Performance"):README.index("## Troubleshooting")]
    assert set(re.findall(r"\b[A-Z]\d{3}\b", section)) == {run["machine"]["gpu"].split()[-1]} == {"H200"}
    date, record = re.search(r"Triton [\d.]+\), (\d{4}-\d\d-\d\d), `data/bench/([\w.-]+)`", PROSE).groups()
    assert date == run["date"][:10] and record == RECORDED
    aiter = re.search(r"aiter's Triton `unified_attention` \(aiter ([\d.]+)\)", PROSE).group(1)
    assert run["versions"]["amd-aiter"].startswith(aiter + ".")
    assert "time_vs_context" in (Path(__file__).resolve().parent.parent / "notebooks"
                                 / "05_kernels_and_performance.py").read_text() and "notebook 05 plots it" in PROSE


def test_verify_across_paths_sentence():
    """The kit's verify against every other path's, recomputed from the stage's record."""
    found = re.search(r"\(`data/bench/verify_paths/([\w.-]+)`\), the kit's was the fastest in every cell; at "
                      r"B 8-128 the next fastest took ([\d.]+)-([\d.]+)x the kit's time at page size 1", PROSE)
    assert found, "the README's sentence on every path's verify changed: update this test with it"
    assert found.group(1) == VERIFY_PATHS_RECORD.name
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
    assert found.groups()[1:] == (f"{min(ratios):.2f}", f"{max(ratios):.2f}")


WORDS = {n: w for n, w in enumerate(("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                                              "ten"))}


def test_conventions_caption():
    """The picture at the top: one window held as Hugging Face writes it, handed unconverted to every API."""
    from swa_kit.lessons.workshop.windows import keys_if_passed_unconverted

    found = re.search(r"The same window \((\d+) keys, Hugging Face's `sliding_window=(\d+)`\) handed unconverted to "
                      r"every API: (\w+) of (\w+) attend one key too many\. Drawn by "
                      r"`swa_kit\.viz\.masks\.conventions_figure\((\d+)\)`; `swa-kit window --from hf (\d+)`", PROSE)
    assert found, "the caption of the conventions picture changed: update this test with it"
    keys, hf, over, total, drawn, command = found.groups()
    assert int(keys) == int(hf) == int(drawn) == int(command)
    reads = keys_if_passed_unconverted(int(keys), "hf")
    assert (over, total) == (WORDS[sum(v == int(keys) + 1 for v in reads.values())], WORDS[len(reads)])
    assert re.search(r"one window in (\w+) APIs' conventions", PROSE).group(1) == total


def test_the_guard_finding_exits_as_stated(capsys):
    from swa_kit.cli import main

    found = re.search(r"\(`swa-kit explain --model (\S+) --mode (\w+)` refuses, exit (\d+)\)", PROSE)
    assert found, "the README's guard finding changed: update this test with it"
    model, mode, code = found.groups()
    assert main(["explain", "--model", model, "--mode", mode]) == int(code) == 3
    assert "paged_attention_ragged" in capsys.readouterr().out


def test_notebook_count():
    notebooks = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    count = re.search(r"(\w+) notebooks, each executed headless in CI and by `swa-kit tour`", PROSE)
    assert count, "the README's notebooks sentence changed: update this test with it"
    assert count.group(1).lower() == WORDS[len(notebooks)]
