"""The probe: measured masks against known behaviour, SGLang's call sites, the CLI."""

from __future__ import annotations

import json

import pytest
import torch

from swa_kit.attention.paths import get_path
from swa_kit.cli import main
from swa_kit.errors import UsageError
from swa_kit.measure.probe import PROBE_MODES, measure, probe_path, probe_sglang_sites, runnable_paths


def hand_mask(q_len, kv_len, keys):
    """Queries aligned to the end of the KV; key k is seen when it is among the `keys` most recent (or all)."""
    rows = []
    for q in range(kv_len - q_len, kv_len):
        lo = 0 if keys is None else max(0, q - keys + 1)
        rows.append([lo <= k <= q for k in range(kv_len)])
    return torch.tensor(rows, dtype=torch.bool)


@pytest.mark.parametrize("keys", [1, 3, 7])
def test_reference_probe_recovers_the_window_exactly(keys):
    row = probe_path("reference", keys)
    assert row.ok and row.attended_keys == keys and set(row.masks) == set(PROBE_MODES)
    for mask in row.masks.values():
        # `intended` comes from the same Window rule the reference applies: check both against a hand mask.
        expected = hand_mask(mask.q_len, mask.kv_len, keys)
        assert torch.equal(mask.measured, expected) and torch.equal(mask.intended, expected) and mask.heads_agree


def test_probe_detects_a_path_that_ignores_the_window():
    row = probe_path("aiter_emulated_paged_ragged", 4)
    decode = row.masks["decode"]
    assert not row.ok and decode.attended_keys == decode.kv_len  # the whole context
    assert decode.disagree.sum() == decode.kv_len - 4
    assert "prefill" in row.skipped


def test_probe_weights_are_uniform_over_attended_keys():
    mask, result = measure(get_path("torch_sdpa"), 3, 3, "extend", 2, 6)
    assert torch.allclose(mask.weights[mask.measured], torch.full((6,), 1 / 3))
    assert result.path == "torch_sdpa"


def test_probe_spans_more_positions_than_head_dim():
    mask, _ = measure(get_path("torch_sdpa"), 20, 20, "decode", 1, 40, head_dim=16)
    assert mask.ok and mask.attended_keys == 20


def test_sglang_sites_unified_attends_one_key_short_on_aiter_triton():
    rows = {r.site: r for r in probe_sglang_sites(5)}
    for site in ("extend.unified", "decode.unified", "verify.unified", "draft_extend.unified"):
        row = rows[site]
        assert row.path == "aiter_triton_unified" and row.tier.startswith("aiter-triton")
        assert row.window_arg == (3, 0) and row.attended_keys == 4 and not row.ok
    assert rows["extend.ck"].attended_keys == 5 and rows["extend.ck"].ok
    assert rows["decode.paged"].attended_keys > 5 and rows["verify.legacy"].attended_keys > 5


def test_kit_converter_argument_is_exact_for_every_runnable_path():
    for path in runnable_paths("cpu"):
        if not path.honours_window:
            continue
        row = probe_path(path.name, 3)
        assert row.ok, (path.name, {m: mm.attended_keys for m, mm in row.masks.items()}, row.skipped)
        for mask in row.masks.values():
            assert torch.equal(mask.measured, hand_mask(mask.q_len, mask.kv_len, 3)), (path.name, mask.mode)


def test_sglang_sites_need_a_window():
    with pytest.raises(UsageError, match="--keys W >= 1"):
        probe_sglang_sites(None)


def test_cli_probe(capsys, tmp_path):
    png = tmp_path / "probe.png"
    assert main(["probe", "--path", "torch_sdpa", "--keys", "4", "--json", "--png", str(png)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["intended_keys"] == rows[0]["attended_keys"] == 4 and rows[0]["tier"] == "torch"
    assert set(rows[0]) >= {"path", "tier", "window_arg", "intended_keys", "attended_keys", "ok"}
    assert png.stat().st_size > 1000
    assert main(["probe", "--sglang-sites", "--keys", "4", "--mode", "decode", "--json"]) == 1
    sites = {r["site"]: r for r in json.loads(capsys.readouterr().out)}
    assert sites["decode.unified"]["attended_keys"] == 3 and sites["decode.unified"]["window_arg"] == [2, 0]
    with pytest.raises(SystemExit) as refused:  # argparse: --keys 0 is out of range, one line
        main(["probe", "--path", "torch_sdpa", "--keys", "0"])
    assert refused.value.code == 2


def test_agreement_covers_every_runnable_path_and_is_small():
    from swa_kit.measure.probe import agreement

    rows = agreement(4, head_dim=16)
    assert {r["path"] for r in rows} == {b.name for b in runnable_paths("cpu")}
    errors = [r["max_abs_err"] for r in rows if not isinstance(r["max_abs_err"], str)]
    assert errors and max(errors) < 1e-4
