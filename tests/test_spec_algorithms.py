"""The registry of speculative algorithms: its traits against the resolver, SGLang's facts and what reads it."""

from __future__ import annotations

import argparse

import pytest

from swa_kit.commands import explain as explain_command
from swa_kit.engine import routing
from swa_kit.engine.resolver import resolve_swa_kv_pool
from swa_kit.engine.spec_algorithms import ALIASES, LAUNCH_NAMES, PLANNED, SpeculativeAlgorithm
from swa_kit.engine.workers import build_workers
from swa_kit.errors import UsageError
from swa_kit.launch.decide import decide
from swa_kit.launch.inputs import Launch, parse_server_args

A = SpeculativeAlgorithm

# SGLang 0.5.23, written out here as the oracle: speculative/spec_info.py handle_server_args picks the
# arg_groups/speculative_hook.py handler of each algorithm, and is_eagle() is EAGLE, EAGLE3 and FROZEN_KV_MTP.
SGLANG_HANDLER = {"EAGLE": "_handle_eagle_family", "EAGLE3": "_handle_eagle_family",
                  "STANDALONE": "_handle_eagle_family", "FROZEN_KV_MTP": "_handle_frozen_kv_mtp",
                  "NGRAM": "_handle_ngram", "DFLASH": "_handle_dflash", "DSPARK": "_handle_dspark",
                  "UNO": "_handle_uno"}
SGLANG_IS_EAGLE = {"EAGLE", "EAGLE3", "FROZEN_KV_MTP"}


@pytest.mark.parametrize("algo", [a for a in A if a.is_some()])
def test_traits_agree_with_sglangs_handlers_and_predicates(algo):
    assert algo.traits.handler == SGLANG_HANDLER[algo.name]
    assert algo.is_eagle() == (algo.name in SGLANG_IS_EAGLE)
    assert not (algo.traits.owns_kv_pool and algo.traits.reads_target_pool)
    assert algo.traits.draft_model == (algo.traits.owns_kv_pool or algo.traits.reads_target_pool)


@pytest.mark.parametrize("model", ["hybrid_swa", "windowed_one_pool"])
@pytest.mark.parametrize("algo", [a for a in A if a.traits.kit_plans])
def test_resolver_rule_is_what_the_fixed_resolver_returns_for_the_draft(model, algo):
    """Rule 2 returns no pool, rule 3 the allocator's pool: checked on real pools, where SGLang's own predicate
    (``is_frozen_kv_mtp()``) decides, not the traits."""
    workers = build_workers(model, algo)
    if algo.traits.resolver_rule is None:
        assert workers.draft is None
        return
    draft = workers.draft
    returned = resolve_swa_kv_pool(draft)
    allocator_pool = draft.token_to_kv_pool_allocator.get_kvcache()
    is_swa = hasattr(allocator_pool, "translate_loc_from_full_to_swa")
    assert returned is {2: None, 3: allocator_pool if is_swa else None}[algo.traits.resolver_rule]
    assert (draft.kv_pool_read is workers.target.token_to_kv_pool) == algo.traits.reads_target_pool
    assert draft.writes_kv == algo.traits.owns_kv_pool


def test_names_the_launch_accepts_and_refuses():
    for name in LAUNCH_NAMES:
        assert parse_server_args(f"--speculative-algorithm {name.lower()}").speculative_algorithm == name
    for name in ("MEDUSA", "NONE"):
        with pytest.raises(UsageError, match=f"'{name}': one of EAGLE, EAGLE3, STANDALONE, FROZEN_KV_MTP, NGRAM, "
                                             "DFLASH, DSPARK, UNO, NEXTN, MTP"):
            parse_server_args(f"--speculative-algorithm {name}")


@pytest.mark.parametrize("alias", list(ALIASES))
def test_an_alias_decides_as_its_algorithm(alias):
    """NEXTN (SGLang's alias of EAGLE) and MTP plan the routes, draft and speculation of EAGLE; only the spelling
    the engineer gave is kept."""
    runs = {name: decide(Launch.from_inputs(model="gemma4-31b", server_args=f"--speculative-algorithm {name} "
                                                                            "--attention-backend aiter"))
            for name in (alias, ALIASES[alias].name)}
    ours, theirs = runs[alias], runs[ALIASES[alias].name]
    assert {k: p.to_json() for k, p in ours.routes.items()} == {k: p.to_json() for k, p in theirs.routes.items()}
    assert ours.draft_pool.value.algorithm == alias and theirs.draft_pool.value.algorithm == ALIASES[alias].name
    assert ours.draft_pool.value.layout == theirs.draft_pool.value.layout


def test_the_planner_and_the_cli_take_exactly_the_planned_algorithms():
    assert PLANNED == ("none", "eagle", "eagle3", "standalone", "frozen_kv_mtp")
    parser = argparse.ArgumentParser()
    explain_command.add_arguments(parser)
    spec = next(a for a in parser._actions if a.dest == "spec")
    assert tuple(spec.choices) == PLANNED
    for name in PLANNED[1:]:
        assert routing.plan("gemma4-31b", "verify", spec=name, strict=False).spec == name
    for name in ("ngram", "dflash", "nextn", "EAGLE"):
        with pytest.raises(UsageError, match=f"unknown speculative algorithm '{name}'; one of none, eagle, eagle3"):
            routing.plan("gemma4-31b", "verify", spec=name, strict=False)


def test_single_chain_is_refused_with_topk_above_one():
    chain = [a for a in A if a.traits.single_chain]
    assert chain == [A.FROZEN_KV_MTP]
    with pytest.raises(UsageError, match="FROZEN_KV_MTP drafts a single chain: topk must be 1, got 2"):
        routing.plan("gemma4-31b", "verify", spec="frozen_kv_mtp", topk=2, strict=False)
    with pytest.raises(UsageError, match="--speculative-eagle-topk 4 with FROZEN_KV_MTP: it drafts a single chain"):
        parse_server_args("--speculative-algorithm frozen_kv_mtp --speculative-eagle-topk 4")
    assert routing.plan("gemma4-31b", "verify", spec="eagle", topk=2, strict=False).topk == 2
