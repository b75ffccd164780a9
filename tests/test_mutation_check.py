"""The differential's mutation check (tests/mutation_check.py): each of the kit's rules changed in a copy of the
kit must make tests/differential.py fail, and the unmutated copy must pass.

The first two tests need no SGLang (every mutation applies to the kit as it is now, exactly once); the rest run
in CI's SGLang venv, SGLang's answers computed once for all of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import mutation_check  # noqa: E402
from mutation_check import MUTATIONS, Mutation, MutationError  # noqa: E402

RULES_ASKED = {"ratio", "default-backend-rocm", "unified-key-count", "gemma4-window", "draft-pool",
               "draft-layers-in-budget", "aiter-memory-cut", "tp-kv-heads"}


def test_the_mutations_cover_the_rules_asked_and_are_distinct():
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names)) >= 8
    assert RULES_ASKED <= set(names)
    assert all(m.before != m.after and m.rule for m in MUTATIONS)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_each_mutation_changes_its_file_exactly_once(mutation, tmp_path):
    copy = mutation_check.copy_kit(tmp_path, mutation) / "swa_kit" / mutation.file
    original = (mutation_check.KIT / mutation.file).read_text()
    assert copy.read_text() == original.replace(mutation.before, mutation.after) != original


@pytest.mark.parametrize("before", ["RATIO_FALLBACK = 0.75", "\n"], ids=["missing", "not-unique"])
def test_a_snippet_not_found_exactly_once_is_an_error(before, tmp_path):
    mutation = Mutation("bad", "launch/pool_sizing.py", before, "x", "a rule")
    with pytest.raises(MutationError, match=r"'bad'.*launch/pool_sizing.py (0|\d\d+) times, not once"):
        mutation_check.copy_kit(tmp_path, mutation)


def test_a_mutation_of_a_missing_file_is_an_error(tmp_path):
    with pytest.raises(MutationError, match="swa_kit/launch/gone.py does not exist"):
        mutation_check.copy_kit(tmp_path, Mutation("gone", "launch/gone.py", "a", "b", "a rule"))


@pytest.fixture(scope="module")
def sglang_answers(tmp_path_factory):
    """SGLang's answers for every launch, computed once (SGLang-facing: fails under SWA_KIT_REQUIRE_SGLANG=1)."""
    from sglang_support import require_sglang

    require_sglang("sglang.srt.server_args", "sglang.srt.arg_groups.pipeline",
                   "sglang.srt.model_executor.pool_configurator", "sglang.srt.models.registry")
    cache = tmp_path_factory.mktemp("mutation") / "sglang-answers.pickle"
    mutation_check.cache_sglang_answers(cache)
    return cache


@pytest.mark.sglang
def test_an_unmutated_copy_passes_the_differential(sglang_answers):
    result = mutation_check.kit_side(None, sglang_answers, every_launch=True)
    assert result["checked"] >= 200
    assert not result["killed_by"], f"the harness fails the kit as it is: {result['killed_by'][:3]}"


@pytest.mark.sglang
@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_the_differential_kills_the_mutation(mutation, sglang_answers):
    result = mutation_check.kit_side(mutation, sglang_answers)
    assert result["killed_by"], (f"mutation {mutation.name!r} SURVIVED the differential ({result['checked']} "
                                 f"launches agree as expected.json lists): {mutation.rule}")
