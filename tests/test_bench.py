"""Benchmark plumbing on CPU: byte/FLOP counts, rows, ratios, targets, schema, recorded runs, CLI, pictures."""

from __future__ import annotations

import json
import os
import random

import pytest
import torch

from swa_kit.measure import bench
from swa_kit.measure.bench import timing
from swa_kit.measure.bench.results import same_bytes_fractions
from swa_kit.attention.batch import poison_unattended, random_paged_batch
from swa_kit.attention.reference import reference_attention
from swa_kit.cli import main
from swa_kit.errors import UsageError
from swa_kit.viz import bench as viz
from swa_kit.window import Window

RECORDED = bench.recorded_files()
rng = random.Random(int.from_bytes(os.urandom(4), "little"))


def test_decode_bytes_count_the_window_of_every_request_and_kv_head() -> None:
    for _ in range(50):
        b, hkv, d = rng.choice([1, 32, 128]), rng.choice([1, 8, 16]), rng.choice([64, 128, 256])
        ctx, w = rng.randint(1, 200_000), rng.randint(1, 10_000)
        case = bench.DecodeCase(b, 32, hkv, d, ctx, w, "float16")
        per_token = 2 * hkv * d * 2  # K and V, 2-byte elements
        assert case.window_bytes == b * min(ctx, w) * per_token
        assert case.kv_bytes(None) == b * ctx * per_token


def test_prefill_flops_count_attended_pairs() -> None:
    for _ in range(20):
        t, w = rng.randint(1, 300), rng.randint(1, 400)
        case = bench.PrefillCase(t, 4, 2, 8, w)
        pos = torch.arange(t)
        pairs = int(Window(w).attends(pos[:, None], pos[None, :]).sum())
        causal = t * (t + 1) // 2
        assert case.flops(w) == 4 * 4 * 8 * pairs
        assert case.flops(None) == 4 * 4 * 8 * causal


def _synthetic(kit16_us: float = 140.0, kit1_us: float = 160.0, flat: float = 1.02, verify: float = 1.1) -> dict:
    """A result with the headline shape at two contexts and B 1, times in microseconds, copy 4.0 TB/s.

    512 MiB in 140 us is 3.83 TB/s = 96% of 4.0; 160 us at p1 = 84%; SDPA-window 150 us.
    """
    copy = 4.0
    times = {"kit_triton_swa@p16": kit16_us, "kit_triton_swa@p1": kit1_us, "aiter_triton_unified@p16": 400.0,
             "flex_attention": 200.0, "sdpa_window": 150.0}
    rows = []
    for ctx, scale in ((8192, 1.0), (131072, flat)):
        case = bench.DecodeCase(32, 32, 8, 128, ctx, 4096)
        for label, us in times.items():
            path, _, ps = label.partition("@p")
            rows.append(bench.make_row("decode", case, path, int(ps) if ps else None, us * 1e-3 * scale, copy, True,
                                       timing={"method": "test"}))
        twin = bench.verify_twin(case)
        for ps, us in ((16, kit16_us), (1, kit1_us)):
            rows.append(bench.make_row("verify", twin, "kit_triton_swa", ps, us * 1e-3 * scale * verify, copy, True,
                                       timing={"method": "test"}))
    other = bench.DecodeCase(1, 32, 8, 128, 8192, 4096)  # another shape: must not mix into the ratios
    rows.append(bench.make_row("decode", other, "kit_triton_swa", 16, 0.05, copy, True, timing={"method": "test"}))
    rows.append(bench.make_row("decode", other, "sdpa_window", None, 0.045, copy, True, timing={"method": "test"}))
    pcase = bench.PrefillCase(8192, 32, 8, 128, 1024)
    prefill = [bench.make_row("prefill", pcase, "flex_attention", None, 2.0, None, True),
               bench.make_row("prefill", pcase, "sdpa_dense_mask", None, 9.0, None, True),
               bench.make_row("prefill", pcase, "sdpa_full", None, 1.5, None, True)]
    bench.add_ratios(rows)
    bench.add_ratios(prefill)
    result = {"schema": bench.SCHEMA, "date": "2026-11-29T00:00:00+00:00", "command": "test", "copy_tbs": copy,
              "machine": {"gpu": "Test GPU", "sms": 1}, "versions": {"torch": torch.__version__},
              "decode": rows, "prefill": prefill, "checks": [], "skipped": []}
    result["targets"] = bench.evaluate_targets(result)
    return result


def test_rows_report_bandwidth_and_tflops() -> None:
    case = bench.DecodeCase(32, 32, 8, 128, 8192, 4096)
    row = bench.make_row("decode", case, "kit_triton_swa", 16, 0.125, 4.0, True)
    assert row["window_tbs"] == pytest.approx(case.window_bytes / 0.125e-3 / 1e12)
    assert row["copy_fraction"] == pytest.approx(row["window_tbs"] / 4.0)
    wider = bench.make_row("decode", case, "kit_triton_swa", 16, 0.125, 4.0, True, keys=4103)  # W + 7 drafts
    assert wider["keys"] == 4103 and "keys" not in row
    assert wider["window_tbs"] == pytest.approx(2 * 32 * 8 * 4103 * 128 * 2 / 0.125e-3 / 1e12)
    pcase = bench.PrefillCase(8192, 32, 8, 128, 1024)
    prow = bench.make_row("prefill", pcase, "flex_attention", None, 2.0, None, True)
    assert prow["tflops"] == pytest.approx(pcase.flops(1024) / 2e-3 / 1e12)
    full = bench.make_row("prefill", pcase, "sdpa_full", None, 2.0, None, True)
    assert full["tflops"] > full["window_tflops"]  # full attention does more work than the window needs


def test_ratios_compare_every_path_of_the_same_case_only() -> None:
    result = _synthetic()
    for row in result["decode"]:
        same = [r for r in result["decode"] if r["case"] == row["case"] and r is not row]
        assert set(row.get("ratios", {})) == {r["label"] for r in same}
        for r in same:
            assert row["ratios"][r["label"]] == pytest.approx(r["time_ms"] / row["time_ms"])
            assert row["ratios"][r["label"]] * r["ratios"][row["label"]] == pytest.approx(1.0)


def _verdicts(result: dict) -> dict:
    return {t["target"]: t for t in result["targets"]}


def test_targets_met_and_missed() -> None:
    good = _verdicts(_synthetic(kit16_us=140.0, kit1_us=145.0))
    assert good["bandwidth"]["met"] and good["bandwidth"]["cells"] == 4  # 2 contexts x 2 page sizes, B > 1 only
    assert good["vs_sdpa_window"]["met"]  # 150 / 145 and 150 / 140
    assert good["verify_over_decode"]["met"] and good["verify_over_decode"]["worst"] == pytest.approx(1.1)
    assert good["context_flatness"]["met"]
    b1 = good["b1_vs_fastest"]  # B 1: the kit 50 us, SDPA 45 us: 0.9 >= 1 / 1.2
    assert b1["met"] and b1["worst"] == pytest.approx(0.9)
    bad = _verdicts(_synthetic(kit16_us=170.0, kit1_us=190.0, flat=1.2, verify=1.3))
    assert not bad["bandwidth"]["met"] and bad["bandwidth"]["missed"] == 4  # 79% and 70%
    misses = {(m["context"], m["page_size"]) for m in bad["vs_sdpa_window"]["misses"]}
    assert misses == {(8192, 16), (8192, 1), (131072, 16), (131072, 1)}
    assert not bad["verify_over_decode"]["met"] and not bad["context_flatness"]["met"]
    prefill = bad["prefill_fastest"]
    assert "flex_attention" in next(iter(prefill["by_case"].values()))  # sdpa_full is not windowed: excluded


def test_misses_say_whether_a_copy_a_read_or_the_verify_tile_misses_too() -> None:
    """Each bandwidth miss carries what one copy and one read of the same bytes reached, each verify miss what
    decode took in the verify's query tile, and over the verify's keys in it; the counts are recomputed here from
    the synthetic times."""
    result = _synthetic(kit16_us=170.0, kit1_us=190.0, verify=1.3)  # 79% and 70% of copy; verify 1.3x
    window_bytes = bench.DecodeCase(32, 32, 8, 128, 8192, 4096).window_bytes
    copy_share = rng.choice([0.5, 0.95])  # a copy of those bytes below or above the 90% target
    result["copy_same_bytes"] = [{"bytes": window_bytes, "tbs": copy_share * result["copy_tbs"], "us": 1.0}]
    read_share = rng.choice([0.6, 0.93])
    result["read_same_bytes"] = [{"bytes": window_bytes, "tbs": read_share * result["copy_tbs"], "us": 1.0}]
    tile = rng.choice([1.05, 1.25])  # decode in the verify's tile: under or over the 1.15x target
    keys_tile = rng.choice([1.1, 1.28])  # ... and over the verify's keys too (at most the verify's 1.3x)
    for name, factor in ((bench.VERIFY_TILE, tile), (bench.VERIFY_KEYS_TILE, keys_tile)):
        result[name] = [{**r, "time_ms": r["time_ms"] * factor} for r in result["decode"]
                        if r["path"] == "kit_triton_swa" and r["case"]["batch"] == 32 and r["mode"] == "decode"]
    verdict = _verdicts({**result, "targets": bench.evaluate_targets(result)})
    bandwidth, verify = verdict["bandwidth"], verdict["verify_over_decode"]
    assert bandwidth["missed"] == 4 and all(m["same_bytes_copy_fraction"] == copy_share for m in bandwidth["misses"])
    assert bandwidth["copy_of_same_bytes_misses_too"] == (4 if copy_share < 0.9 else 0)
    assert all(m["same_bytes_read_fraction"] == read_share for m in bandwidth["misses"])
    assert bandwidth["read_of_same_bytes_misses_too"] == (4 if read_share < 0.9 else 0)
    assert verify["missed"] == 4 and all(m["verify_tile_over_decode"] == pytest.approx(tile) for m in verify["misses"])
    assert verify["verify_tile_misses_too"] == (4 if tile > 1.15 else 0)
    assert all(m["verify_keys_tile_over_decode"] == pytest.approx(keys_tile) for m in verify["misses"])
    assert verify["verify_keys_tile_misses_too"] == (4 if keys_tile > 1.15 else 0)
    text = "\n".join(bench.summary_lines({**result, "targets": bench.evaluate_targets(result)}))
    assert "a plain copy of the same bytes" in text and "decode alone in the verify's query tile" in text
    assert "one read of the same bytes" in text and "decode over the verify's keys in its query tile" in text
    older = _synthetic(kit16_us=170.0, kit1_us=190.0)  # a run recorded before all three: no claim either way
    claims = {"copy_of_same_bytes_misses_too", "read_of_same_bytes_misses_too", "verify_tile_misses_too",
              "verify_keys_tile_misses_too"}
    assert not claims & set().union(*older["targets"])


def test_timing_refuses_bad_flushes_and_sizes() -> None:
    """The flush and the read ceiling name the bad value and the way out (checked before any GPU work)."""
    with pytest.raises(ValueError, match=r"by='erase'.*'read'.*'write'"):
        timing.L2Flush(torch.device("cpu"), 1024, by="erase")
    for nbytes in (0, 3):
        with pytest.raises(ValueError, match=f"nbytes={nbytes}: give a positive multiple of 2"):
            timing.read_bandwidth(torch.device("cpu"), None, nbytes)
    for nbytes in (0, 1023):  # a flush smaller than asked would be silent
        with pytest.raises(ValueError, match=f"nbytes={nbytes}: give a positive multiple of 4"):
            timing.L2Flush(torch.device("cpu"), nbytes)
    flush = timing.L2Flush(torch.device("cpu"), 1024)
    assert flush.by == "read" and flush.buffer.numel() * 4 == 1024
    with pytest.raises(ValueError, match="how='write': the same bytes were timed by a 'copy' and by a 'read'"):
        same_bytes_fractions({"copy_tbs": 4.0}, "write")


def _bytes_by_counting(case: bench.DecodeCase) -> int:
    """The least bytes of a case counted position by position: the set of keys each request's queries attend."""
    total, L = 0, case.context
    for q_len in case.q_lens():
        keys = set()
        for pos in range(L - q_len, L):  # query positions; each sees (pos - W, pos]
            keys.update(range(max(0, pos - case.window + 1), pos + 1))
        total += len(keys) * case.hkv * case.head_dim * 2 + q_len * case.hq * case.head_dim * 2  # K+V; Q+out
    return total * case.itemsize


def test_verify_traffic_is_counted_from_the_keys_and_queries_it_must_move() -> None:
    for _ in range(20):
        b, (hq, hkv, d, sinks) = rng.randint(1, 8), rng.choice(list(bench.HEAD_SHAPES.values()))
        ctx, w = rng.randint(1, 300), rng.randint(1, 400)
        decode = bench.DecodeCase(b, hq, hkv, d, ctx, w, sinks=sinks)
        verify = bench.DecodeCase(b, hq, hkv, d, ctx, w, sinks=sinks, drafts=rng.randint(2, 8))
        assert decode.least_bytes == _bytes_by_counting(decode)
        assert verify.least_bytes == _bytes_by_counting(verify)
    gpt_oss = bench.DecodeCase(128, 64, 8, 64, 8192, 128, sinks=True)  # queries and outputs next to a short window
    ratio = bench.DecodeCase(**{**gpt_oss.__dict__, "drafts": 8}).least_bytes / gpt_oss.least_bytes
    assert ratio > 1.15


def test_verify_misses_say_whether_the_traffic_alone_misses() -> None:
    result = _synthetic(kit16_us=170.0, kit1_us=190.0, verify=1.3)  # the headline shape, verify 1.3x
    verify = _verdicts({**result, "targets": bench.evaluate_targets(result)})["verify_over_decode"]
    case = bench.DecodeCase(32, 32, 8, 128, 8192, 4096)
    traffic = _bytes_by_counting(bench.DecodeCase(**{**case.__dict__, "drafts": 8})) / _bytes_by_counting(case)
    assert verify["missed"] == 4
    assert all(m["verify_bytes_over_decode"] == pytest.approx(traffic) for m in verify["misses"])
    assert verify["verify_bytes_misses_too"] == 0  # W 4096: 2..8 queries add under 1% to the window's bytes
    text = "\n".join(bench.summary_lines({**result, "targets": bench.evaluate_targets(result)}))
    assert "in 0 of those 4, the verify must move over 1.15x decode's bytes" in text
    met = _verdicts(_synthetic(verify=1.1))["verify_over_decode"]  # nothing missed: nothing to say about it
    assert met["met"] and "verify_bytes_misses_too" not in met


def test_grid_rows_pair_every_kit_row_with_its_ratios_and_verify_twin() -> None:
    result = _synthetic()
    grid = bench.grid_rows(result)
    assert len(grid) == 5  # 2 contexts x 2 page sizes at B 32, one page size at B 1
    for g in grid:
        if g["case"]["batch"] == 32:
            kit = 140.0 if g["page_size"] == 16 else 160.0
            assert g["vs_sdpa_window"] * g["kit_us"] == pytest.approx(150.0 * g["kit_us"] / kit)
            assert g["vs_aiter"] * g["kit_us"] == pytest.approx(400.0 * g["kit_us"] / kit)
            assert g["verify_over_decode"] == pytest.approx(1.1)
    assert all(set(r) >= {"B", "heads", "kit_us", "xSDPA_w", "ver/dec"} for r in bench.grid_table(result))


def test_schema_check_names_what_is_missing(tmp_path) -> None:
    result = _synthetic()
    path = bench.save(result, tmp_path / "run.json")
    loaded = bench.load_recorded(path)
    assert loaded["recorded"] is True and loaded["decode"] == json.loads(json.dumps(result["decode"]))
    del result["copy_tbs"]
    with pytest.raises(ValueError, match="copy_tbs"):
        bench.check_schema(result)
    result = _synthetic()
    del result["decode"][0]["time_ms"]
    with pytest.raises(ValueError, match="time_ms"):
        bench.check_schema(result)


@pytest.mark.skipif(not RECORDED, reason="no recorded run in data/bench")
@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_recorded_runs_load_and_their_numbers_add_up(path) -> None:
    result = bench.load_recorded(path)
    assert result["recorded"] and result["machine"]["gpu"] and result["command"] and result["versions"]["torch"]
    assert 1.0 < result["copy_tbs"] < 20.0
    for row in result["decode"]:
        if row.get("time_ms"):
            case = bench.DecodeCase(**row["case"])
            assert row["window_tbs"] == pytest.approx(case.window_bytes / (row["time_ms"] * 1e-3) / 1e12)
            for label, ratio in row.get("ratios", {}).items():
                other = next(r for r in result["decode"] if r["label"] == label and r["case"] == row["case"])
                assert ratio == pytest.approx(other["time_ms"] / row["time_ms"])
    as_recorded = result["targets_as_recorded"]  # what the run's own evaluator wrote; loading evaluates again
    assert [(t["target"], t["met"], t["missed"]) for t in result["targets"]] == [
        (t["target"], t["met"], t["missed"]) for t in as_recorded]
    assert "verify_bytes_misses_too" in next(t for t in result["targets"] if t["target"] == "verify_over_decode")


def test_pictures_render_and_say_recorded() -> None:
    result = _synthetic()
    result["recorded"] = True
    for make in (viz.time_vs_context, viz.bandwidth_roofline, viz.ratios, viz.prefill_tflops):
        fig = make(result)
        titles = " ".join(ax.get_title() for ax in fig.axes)
        assert "RECORDED on Test GPU" in titles, make.__name__
    labels, matrix = viz.ratio_matrix(result)
    assert matrix.shape == (len(labels), len(labels)) and matrix.diagonal() == pytest.approx(1.0)
    assert labels[0] == "kit_triton_swa@p16"  # fastest first


def test_random_batch_pages_are_disjoint_and_poison_spares_the_window() -> None:
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    batch = random_paged_batch([1, 1, 1], [40, 3, 17], num_q_heads=4, num_kv_heads=2, head_dim=16, page_size=4,
                               spare_pages=0, generator=gen)
    slots = batch.kv_indices.tolist()
    assert len(set(slots)) == len(slots) and 0 not in slots  # slot 0 stays the dummy
    assert batch.block_table().shape == (3, 10)  # whole aligned pages, or block_table() would raise
    poison_unattended(batch, 5)
    out = reference_attention(batch, 5).out
    assert torch.isfinite(out).all()
    assert torch.isnan(batch.k_buffer).any()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
def test_cli_without_gpu(capsys) -> None:
    assert main(["bench", "--require-gpu"]) == 4
    assert "--require-gpu" in capsys.readouterr().err
    if RECORDED:
        assert main(["bench"]) == 0
        captured = capsys.readouterr()
        assert "RECORDED" in captured.out and "no GPU here" in captured.err
        assert main(["bench", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["recorded"] is True


def test_decode_inputs_reference_is_the_kits_reference_over_the_same_slots() -> None:
    """The bench's float64 reference (all queries at once, sinks) against the oracle on the slots the kernels read."""
    from swa_kit.attention.batch import AttentionBatch
    from swa_kit.attention.reference import reference_attention
    from swa_kit.attention.sinks import reference_with_sinks
    from swa_kit.measure.bench.paths import DecodeInputs

    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    for sinks in (False, True):
        case = bench.DecodeCase(batch=3, hq=8, hkv=2, head_dim=16, context=96, window=20, dtype="float32", sinks=sinks)
        data = DecodeInputs(case, torch.device("cpu"), gen)
        for twin in (data, data.with_queries(bench.verify_twin(case))):
            for ps in (1, 16):
                table = twin.tables[ps][0]
                if ps == 1:
                    kv_indices = table
                else:
                    kv_indices = (table.view(case.batch, -1).long()[:, :, None] * 16 + torch.arange(16)).flatten()
                batch = AttentionBatch(twin.q, twin.k, twin.v, twin.q_start, torch.arange(4) * 96, kv_indices,
                                       twin.sm_scale, page_size=ps)
                oracle = (reference_attention(batch, 20).out if not sinks
                          else reference_with_sinks(batch, 20, twin.sinks))
                assert torch.isfinite(oracle).all()  # the oracle never touches the NaN dummy page
                assert torch.allclose(twin.reference(ps), oracle, atol=1e-10)
                if twin is data:  # decode over as many keys as the verify twin reads (20 + 8 - 1), same slots
                    wide = (reference_attention(batch, 27).out if not sinks
                            else reference_with_sinks(batch, 27, twin.sinks))
                    assert torch.isfinite(wide).all() and torch.allclose(data.reference(ps, keys=27), wide, atol=1e-10)
                    assert not torch.allclose(wide, oracle, atol=1e-3)  # the wider window is another attention
        for inputs, bad, widest in ((data, 28, 27), (twin, 25, 24)):  # past the held pages (the twin: 2..4 queries)
            for keys in (0, bad):
                with pytest.raises(ValueError, match=f"keys={keys}: .* take 1..{widest}"):
                    inputs.reference(16, keys=keys)
    # a window wider than the context: every key, and no page left to reach past
    short = DecodeInputs(bench.DecodeCase(2, 8, 2, 16, 32, 40, dtype="float32"), torch.device("cpu"), gen)
    batch = AttentionBatch(short.q, short.k, short.v, short.q_start, torch.arange(3) * 32, short.tables[1][0],
                           short.sm_scale, page_size=1)
    whole = reference_attention(batch, None).out
    for keys in (None, 32, 500):
        assert torch.allclose(short.reference(1, keys=keys), whole, atol=1e-10), keys
    with pytest.raises(ValueError, match="keys=0: "):
        short.reference(1, keys=0)


def _torch_path_error(inputs, path: str) -> float:
    """A torch path's relative error against the float64 reference without sinks (the torch paths take none)."""
    from swa_kit.measure.bench.paths import as_tokens
    from swa_kit.measure.bench.run import relative_error

    fn, _, facts = getattr(inputs, path)()
    return relative_error(as_tokens(fn(), facts.get("q_len", 1)), inputs.reference(16, with_sinks=False))


def test_sdpa_over_the_keys_some_query_attends_is_the_reference_in_decode_and_verify() -> None:
    """SDPA over the pre-sliced keys (masked per query row in a verify of one q_len per request), and in decode over the
    whole context with a dense mask, against the float64 reference, with windows shorter and longer than the drafts; a
    ragged verify, and a verify on the decode-only paths, refused by name."""
    from swa_kit.measure.bench.paths import DecodeInputs
    from swa_kit.errors import PathUnavailableError

    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    for window in (rng.randint(1, 7), rng.randint(9, 60)):
        for sinks in (False, True):
            case = bench.DecodeCase(batch=3, hq=8, hkv=2, head_dim=16, context=96, window=window, dtype="float32",
                                    sinks=sinks)
            data = DecodeInputs(case, torch.device("cpu"), gen)
            verify = data.with_queries(bench.verify_twin(case, ragged=False))
            assert verify.q_lens == [bench.DRAFTS] * 3
            for inputs in (data, verify):
                assert _torch_path_error(inputs, "sdpa_window") < 1e-5, (window, inputs.q_lens)
            # over the whole context (random keys before the pool's span), masked to decode's window
            assert _torch_path_error(data, "sdpa_dense_mask") < 1e-5, window
    ragged = data.with_queries(bench.verify_twin(case))
    for path in ("sdpa_window", "flex", "sdpa_dense_mask", "sdpa_full"):
        with pytest.raises(PathUnavailableError, match=r"one q_len per batch, not a ragged one \(\[2, 3, 4\]\)"):
            getattr(ragged, path)()
    for path in ("sdpa_dense_mask", "sdpa_full"):
        with pytest.raises(PathUnavailableError, match=f"{path} is timed for decode only"):
            getattr(verify, path)()


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # inductor's import
def test_flex_attention_over_the_whole_context_is_the_reference_in_decode_and_verify() -> None:
    """FlexAttention (compiled on the CPU) over the whole contiguous context: its keys before the pool's span are
    random, so a mask that let a verify's first query see one key too many, or decode's window one key too far, would
    miss the reference."""
    from swa_kit.measure.bench.paths import DecodeInputs

    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    case = bench.DecodeCase(batch=2, hq=8, hkv=2, head_dim=16, context=256, window=rng.randint(9, 60),
                            dtype="float32")
    data = DecodeInputs(case, torch.device("cpu"), gen)
    for inputs in (data, data.with_queries(bench.verify_twin(case, ragged=False))):
        assert _torch_path_error(inputs, "flex") < 1e-5, (case.window, inputs.q_lens)


def test_torch_path_outputs_map_back_to_the_kits_token_rows() -> None:
    """``as_tokens`` undoes the torch paths' query layout (row ``i * G + g`` of ``[B, Hkv, q_len x G, D]``)."""
    from swa_kit.measure.bench.paths import as_tokens

    b, hkv, g, d, n = 3, 2, 4, 5, rng.randint(3, 8)
    tokens = torch.randn(b * n, hkv * g, d)
    grouped = tokens.view(b, n, hkv, g, d).transpose(1, 2).reshape(b, hkv, n * g, d)
    assert torch.equal(as_tokens(grouped, n), tokens)
    assert grouped[1, 1, 2 * g + 3].equal(tokens[1 * n + 2, 1 * g + 3])  # request 1, KV head 1, query 2, head 3
    decode = torch.randn(b, hkv, g, d)  # one query a request: the KV heads' groups side by side
    assert torch.equal(as_tokens(decode), decode.reshape(b, hkv * g, d))


def test_a_case_refuses_a_verify_of_one_query() -> None:
    for drafts in (1, -2):
        with pytest.raises(ValueError, match=f"drafts={drafts}: give 0 \\(decode\\) or 2 and more"):
            bench.DecodeCase(8, 32, 8, 128, 8192, 128, drafts=drafts)


def test_verify_cases_are_ragged_and_read_the_decode_kv() -> None:
    case = bench.DecodeCase(32, 64, 8, 64, 8192, 128, sinks=True)
    twin = bench.verify_twin(case)
    assert sorted(set(twin.q_lens())) == list(range(2, bench.DRAFTS + 1)) and twin.decode_twin() == case
    assert twin.window_bytes == case.window_bytes and case.q_lens() == [1] * 32


def test_copy_bandwidth_refuses_a_byte_count_it_cannot_copy_as_given() -> None:
    from swa_kit.measure.bench import timing

    for bad in (0, 3, 6, -4):  # a bf16 copy moves multiples of 4 bytes (2 read + 2 written per element)
        with pytest.raises(ValueError, match=f"moved_bytes={bad}: give a positive multiple of 4"):
            timing.copy_bandwidth(torch.device("cpu"), None, bad)


def _verify_paths_record(times: dict) -> dict:
    """A verify_paths record of one cell per batch: ``times[(path, page_size, mode, batch)]`` in us."""
    return {"note": "test", "rows": [{"head_dim": 128, "batch": b, "window": 128, "path": p, "page_size": ps,
                                      "mode": m, "us": us, "correct": True} for (p, ps, m, b), us in times.items()]}


def test_verify_over_decode_holds_each_path_to_its_own_decode() -> None:
    from swa_kit.measure.bench.verify_paths import next_fastest_verify, verify_over_decode

    kit, flex = [rng.uniform(5, 50) for _ in range(2)]
    ratios = {8: rng.uniform(1.0, 1.3), 32: rng.uniform(1.0, 1.3), 1: 9.0}  # B 1 is left out by default
    times = {}
    for b, ratio in ratios.items():
        times.update({("kit_triton_swa", 16, "decode", b): kit, ("kit_triton_swa", 16, "verify", b): kit * ratio,
                      ("flex_attention", None, "decode", b): flex, ("flex_attention", None, "verify", b): flex * 2})
    record = _verify_paths_record(times)
    rows = {(r["path"], r["mode"]): r for r in verify_over_decode(record)}
    mine = rows[("kit_triton_swa", "verify")]
    assert (mine["cells"], mine["least"], mine["most"]) == (2, round(min(ratios[8], ratios[32]), 3),
                                                            round(max(ratios[8], ratios[32]), 3))
    assert mine["within 1.15x"] == sum(ratios[b] <= 1.15 for b in (8, 32))
    assert rows[("flex_attention", "verify")]["median"] == 2.0
    versus = next_fastest_verify(record, 16)
    assert versus["next_fastest"] == {"flex_attention": 2}
    assert versus["least"] == pytest.approx(min(flex * 2 / (kit * ratios[b]) for b in (8, 32)))
    times[("flex_attention", None, "verify", 8)] = None  # a path that did not run is no competitor
    assert next_fastest_verify(_verify_paths_record(times), 16)["cells"] == 1
    with pytest.raises(UsageError, match="no cell of batch >= 8 has the kit's verify at page size 1"):
        next_fastest_verify(record, 1)
    # another path timed at two page sizes competes with its faster one, whichever row comes first
    for order in ((1, 16), (16, 1)):
        both = {("kit_triton_swa", 16, "verify", 8): kit}
        both.update({("aiter_triton_unified", ps, "verify", 8): kit * (1.5 if ps == 1 else 3.0) for ps in order})
        assert next_fastest_verify(_verify_paths_record(both), 16)["least"] == pytest.approx(1.5)
    with pytest.raises(UsageError, match="no cell of batch >= 64 has a verify beside its path's decode"):
        verify_over_decode(record, min_batch=64)


def test_the_recorded_verify_paths_stage_reads_back() -> None:
    from swa_kit.measure.bench.verify_paths import load_verify_paths, next_fastest_verify, verify_over_decode

    record = load_verify_paths()
    cells = {(r["path"], r["page_size"], r["mode"]): r["cells"] for r in verify_over_decode(record)}
    assert cells[("kit_triton_swa", 1, "verify")] == cells[("sdpa_window", None, "verify")] == 27
    assert cells[("flex_attention", None, "verify")] == 24  # FlexAttention does not compile at Gemma's B 128
    assert next_fastest_verify(record, 1, min_batch=1)["cells"] == 36


def test_a_file_that_is_not_a_verify_paths_record_is_refused(tmp_path) -> None:
    from swa_kit.measure.bench.verify_paths import load_verify_paths

    for name, text in (("list.json", "[1]"), ("grid.json", json.dumps({"rows": [{"mode": "decode"}]})),
                       ("text.json", "not JSON")):
        (tmp_path / name).write_text(text)
        with pytest.raises(UsageError, match=f"{name}' is not a verify_paths record"):
            load_verify_paths(tmp_path / name)
