"""Speculative decoding over the pools: exact with the fixed resolver, the measured failure of each wrong one."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from swa_kit import cli
from swa_kit.errors import DispatchGuardError, UsageError
from swa_kit.lessons.tiny_model import load_models
from swa_kit.lessons.speculative import (
    agreement,
    first_divergence,
    greedy_decode,
    guard_experiment,
    one_key_short_experiment,
    pr_before_after,
    speculative_decode,
    stopped_at,
)

PROMPTS = ("story 8. ", "story 52. lena")
NEW = 48


@pytest.fixture(scope="module")
def setup():
    models = load_models()
    ids = [models.cfg.encode(p) for p in PROMPTS]
    plain = greedy_decode(models, ids, NEW)
    assert plain.error is None and all(len(o) == NEW for o in plain.outputs)
    runs = {(a, r): speculative_decode(models, ids, NEW, a, r)
            for a, r in [("eagle", "fixed"), ("eagle", "naive"), ("eagle", "legacy"),
                         ("frozen_kv_mtp", "fixed"), ("frozen_kv_mtp", "legacy")]}
    return models, ids, plain, runs


@pytest.mark.parametrize("algorithm", ["eagle", "frozen_kv_mtp"])
def test_fixed_resolver_reproduces_plain_greedy_exactly(setup, algorithm: str) -> None:
    _, _, plain, runs = setup
    run = runs[(algorithm, "fixed")]
    assert run.error is None and run.guards == []
    assert run.outputs == plain.outputs
    assert run.acceptance_rate > 0.4, "trained drafts should get real acceptance"
    assert run.mean_accepted_length > 1.8


def test_naive_resolver_silently_costs_eagle_acceptance(setup) -> None:
    _, _, plain, runs = setup
    naive, fixed = runs[("eagle", "naive")], runs[("eagle", "fixed")]
    assert naive.error is None and naive.outputs == plain.outputs  # the target still verifies correctly
    assert naive.acceptance_rate < fixed.acceptance_rate - 0.05
    assert any("#25103" in g for g in naive.guards)  # the kit's dispatch would have refused the route


def test_legacy_resolver_keeps_eagle_intact(setup) -> None:
    _, _, plain, runs = setup
    legacy, fixed = runs[("eagle", "legacy")], runs[("eagle", "fixed")]
    assert legacy.outputs == plain.outputs and legacy.acceptance_rate == fixed.acceptance_rate


def test_legacy_resolver_breaks_frozen_kv_mtp_with_a_clear_slot_error(setup) -> None:
    _, _, plain, runs = setup
    legacy = runs[("frozen_kv_mtp", "legacy")]
    assert legacy.error is not None and legacy.error.startswith("SlotError")
    assert "translate" in legacy.error
    assert agreement(legacy.outputs, plain.outputs) < 1.0


def test_legacy_frozen_kv_mtp_bug_hides_while_full_and_swa_ids_coincide(setup) -> None:
    # Measured, not assumed: with an SWA pool as large as the full one, both allocators hand out the same
    # ids in the same order, so reading the SWA buffer with full ids reads the right rows - no error, same
    # acceptance. The bug shows only once the id spaces drift apart (a smaller SWA pool, see above).
    models, ids, plain, runs = setup
    big = speculative_decode(models, ids, NEW, "frozen_kv_mtp", "legacy", size_swa=len(ids) * 200)
    assert big.error is None and big.outputs == plain.outputs
    assert big.acceptance_rate == runs[("frozen_kv_mtp", "fixed")].acceptance_rate


def test_enforced_guards_refuse_the_wrong_resolvers(setup) -> None:
    models, ids, _, _ = setup
    for algorithm, resolver in [("eagle", "naive"), ("frozen_kv_mtp", "legacy")]:
        run = speculative_decode(models, ids, 8, algorithm, resolver, enforce_guards=True)
        assert run.error is not None and run.error.startswith("DispatchGuardError")


def test_tree_verify_is_refused_on_the_swa_model(setup) -> None:
    models, ids, _, _ = setup
    with pytest.raises(DispatchGuardError, match="gets no window"):
        speculative_decode(models, ids, 8, "eagle", "fixed", topk=2)


def test_window_ignoring_kernel_diverges_only_after_the_window_fills(setup) -> None:
    models, ids, plain, _ = setup
    report = guard_experiment(models, ids, NEW, plain)
    assert report["agreement_with_plain"] < 1.0
    assert report["error_with_guard"].startswith("DispatchGuardError")
    for first, fills in zip(report["first_divergence"], report["window_fills_at"]):
        assert first is None or first >= fills
    # The run says what computed it: the emulated window-ignoring kernel for the rerouted layer,
    # the reference for the others.
    used = {(c["path"], c["tier"]) for c in report["computed_by"]}
    assert ("aiter_emulated_paged_ragged", "emulated") in used and ("reference", "reference") in used
    # A full or missing layer has no window to drop: refused before decoding (a full one once decoded twice,
    # then failed on None - int).
    for layer in (models.cfg.full_layers[0], len(models.cfg.windows)):
        with pytest.raises(UsageError, match=f"layer {layer}: the guard experiment reroutes a sliding layer"):
            guard_experiment(models, ids, NEW, plain, layer=layer)


def test_sglang_window_argument_is_one_key_short_and_changes_the_output(setup) -> None:
    models, ids, plain, _ = setup
    report = one_key_short_experiment(models, ids, NEW, plain)
    window = models.cfg.max_window
    # Every sliding layer sits at a unified site here (the hybrid pool forces it) and attends W - 1.
    assert {(a["site"].split(".")[1], a["intended_keys"], a["effective_keys"]) for a in report["attended"].values()} \
        == {("unified", window, window - 1)}
    assert report["error"] is None and report["agreement_with_plain"] < 1.0
    # A query at position p sees a different key set only once p >= W - 1: no divergence before that.
    fills = [max(0, window - len(p)) for p in ids]
    assert all(first is None or first >= fill for first, fill in zip(report["first_divergence"], fills))


def test_pr_before_after_side_by_side(setup) -> None:
    models, ids, plain, runs = setup
    legacy, fixed = runs[("frozen_kv_mtp", "legacy")], runs[("frozen_kv_mtp", "fixed")]
    rows = pr_before_after(models, ids, NEW, plain, runs={"legacy": legacy, "fixed": fixed})
    by_state = {r["state"]: r for r in rows}
    assert list(by_state) == ["before: legacy", "after: fixed", "before: guard off", "after: guard on"]
    # A crashed run reports where it stopped, never an agreement share.
    stopped = stopped_at(legacy, NEW)
    assert stopped == [len(o) for o in legacy.outputs] and max(stopped) < NEW
    before = by_state["before: legacy"]
    assert before["output"] == f"stopped at token {', '.join(map(str, stopped))} of {NEW}: SlotError"
    assert "%" not in before["output"] and "untranslated" in before["slots read"]
    after = by_state["after: fixed"]
    assert after["output"] == "equal to plain decoding" and after["acceptance_rate"] == round(fixed.acceptance_rate, 4)
    assert "translated" in after["slots read"] and "untranslated" not in after["slots read"]
    off, on = by_state["before: guard off"], by_state["after: guard on"]
    assert off["output"].startswith("differs from plain decoding from token") and "[emulated]" in off["route"]
    assert on["output"] == f"stopped at token 1, 1 of {NEW}: DispatchGuardError"
    assert off["acceptance_rate"] is None and on["acceptance_rate"] is None
    assert stopped_at(fixed, NEW) is None


def test_resolver_rows_never_give_a_stopped_run_an_agreement(setup) -> None:
    from swa_kit.lessons.speculative import resolver_rows

    models, ids, plain, _ = setup
    rows, runs = resolver_rows(models, ids, 40, greedy_decode(models, ids, 40))
    for row, run in zip(rows, runs):
        assert (row["agreement_with_plain"] is None) == (row["error"] is not None) == (row["stopped_at"] is not None)
        if row["stopped_at"] is not None:
            assert row["stopped_at"] == [len(o) for o in run.outputs]


def test_first_divergence_and_agreement() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 5, 3], [1, 2, 3]) == 1
    assert first_divergence([1], [1, 2]) == 1
    assert agreement([[1, 2], [3]], [[1, 2], [3, 4]]) == 0.75


def test_cli_json_schema() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["spec-demo", "--json", "--max-new-tokens", "6"]) == 0
    result = json.loads(out.getvalue())
    assert isinstance(result["seconds"], float)
    assert [(r["algorithm"], r["resolver"]) for r in result["rows"]] == [
        (a, r) for a in ("eagle", "frozen_kv_mtp") for r in ("legacy", "naive", "fixed")]
    for row in result["rows"]:
        assert {"algorithm", "resolver", "acceptance_rate", "mean_accepted_length", "agreement_with_plain",
                "error"} <= set(row)
        assert row["error"] is None or isinstance(row["error"], str)
    assert {"agreement_with_plain", "first_divergence", "error_with_guard"} <= set(result["guard_experiment"])
    with pytest.raises(SystemExit) as refused:  # argparse: at least 2 tokens, one line
        cli.main(["spec-demo", "--max-new-tokens", "1"])
    assert refused.value.code == 2


def test_bad_arguments_name_the_value():
    models = load_models()
    ids = [models.cfg.encode(PROMPTS[0])]
    with pytest.raises(UsageError, match="unknown algorithm 'medusa'"):
        speculative_decode(models, ids, 4, "medusa")
    with pytest.raises(UsageError, match="num_draft 0"):
        speculative_decode(models, ids, 4, "eagle", num_draft=0)
