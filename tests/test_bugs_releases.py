"""The known-bugs corpus against real SGLang releases: each entry's release pair (``releases`` in data/bugs) read
from the wheels on the package index.

For every entry with a pair: the fix's own line is in its file of the first release with the fix and not in that
file of the last release without it; the kit's replay raises the entry's finding at its ``before-<N>`` setting and
not at the fixed version. Where an entry names a decision (``releases.runs``), both releases' own code for it runs on
CPU, on stand-in runners and pools or a config (tests/release_support.py), and must agree with the kit's answer at
``before-<N>`` and at SGLang 0.5.23. Each wheel is downloaded once per run, with no dependency and no install.

CI runs this module in its own step (.ci/run, marker ``releases``); there a wheel that cannot be downloaded fails the
test. Elsewhere it skips saying why.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from release_support import (
    ReleaseWheels,
    asserted_choices,
    backend_swa_pool,
    draft_layers_budgeted,
    has_line,
    runners,
    sliding_window_argument,
    trtllm_kernel_arguments,
)

from swa_kit.engine.resolver import RESOLVERS, resolver_for
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm
from swa_kit.launch.decide import decide
from swa_kit.launch.pool_sizing import draft_layers, size_pools
from swa_kit.launch.refusals import gemma4_backends, llama4_backends, unified_memory_backends
from swa_kit.measure import bugs
from swa_kit.models.configs import as_of_version, load_model
from swa_kit.sglang_versions import SGLANG_VERSION

pytestmark = pytest.mark.releases
CORPUS = bugs.load_corpus()
PAIRED = [e for e in CORPUS if e.releases is not None and e.releases.first_with]
RUN = [e for e in PAIRED if e.releases.runs]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> ReleaseWheels:
    return ReleaseWheels(tmp_path_factory.mktemp("sglang-wheels"))


@pytest.mark.parametrize("entry", PAIRED, ids=lambda e: e.id)
def test_the_fix_is_absent_before_and_present_after(wheels, entry):
    r = entry.releases
    before, after = wheels.source(r.last_without, r.fix_file), wheels.source(r.first_with, r.fix_file)
    assert before is not None, f"{r.last_without} has no {r.fix_file}: the pair compares nothing"
    assert after is not None and has_line(after, r.fix_line), f"{r.first_with} lacks the fix's line"
    assert not has_line(before, r.fix_line), f"{r.last_without} already has the fix's line"


@pytest.mark.parametrize("entry", PAIRED, ids=lambda e: e.id)
def test_the_replay_raises_before_the_fix_and_not_after(entry):
    """A pair stands for the entry's before-<N> setting; on a gap entry (replayed at release 0.5.23, a finding the
    audit cannot raise) the pair is the reader's, and the replay must still say gap."""
    if entry.gap:
        assert entry.launch.sglang_version == SGLANG_VERSION and bugs.replay(entry).verdict == "gap"
        return
    assert entry.launch.sglang_version == f"before-{entry.fixed_by}" and entry.after_fix == SGLANG_VERSION
    assert bugs.replay(entry).verdict == "raised, gone after the fix"


BACKEND_RUNS = {"aiter-resolver": ("aiter", "AiterAttnBackend", "sglang/srt/layers/attention/aiter_backend.py"),
                "trtllm-resolver": ("trtllm_mha", "TRTLLMHAAttnBackend",
                                    "sglang/srt/layers/attention/trtllm_mha_backend.py")}


def _resolver_run(wheels, entry):
    backend, cls, path = BACKEND_RUNS[entry.releases.runs]
    differs = False
    for algorithm in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.FROZEN_KV_MTP):
        for version, kit_version in ((entry.releases.last_without, entry.launch.sglang_version),
                                     (entry.releases.first_with, SGLANG_VERSION)):
            theirs = backend_swa_pool(wheels.source(version, path), cls)
            kit = RESOLVERS[resolver_for(backend, kit_version)]
            for name, runner in runners(algorithm).items():
                assert theirs(runner) is kit(runner), (version, kit_version, algorithm.name, name)
        draft = runners(algorithm)["draft"]
        old = backend_swa_pool(wheels.source(entry.releases.last_without, path), cls)
        new = backend_swa_pool(wheels.source(entry.releases.first_with, path), cls)
        differs |= old(draft) is not new(draft)
    assert differs, "the two releases decide alike on every runner: the pair shows no fix"


def _gemma4_window_run(wheels, entry):
    path = entry.releases.fix_file
    model = load_model(entry.launch.model)
    (window,) = {k.window.keys for k in model.kinds.values() if k.attention == "sliding"}
    answers = {}
    for version, kit_version in ((entry.releases.last_without, entry.launch.sglang_version),
                                 (entry.releases.first_with, SGLANG_VERSION)):
        kit = {k.sliding_window_size for k in as_of_version(model, kit_version).kinds.values()
               if k.attention == "sliding"}
        answers[version] = sliding_window_argument(wheels.source(version, path), window)
        assert answers[version] == kit, (version, kit_version)
    assert len(set(map(frozenset, answers.values()))) == 2, "both releases pass the same window"


def _draft_budget_run(wheels, entry):
    path, budgeted = entry.releases.fix_file, []
    for version, kit_version in ((entry.releases.last_without, entry.launch.sglang_version),
                                 (entry.releases.first_with, SGLANG_VERSION)):
        launch = bugs.build_launch(entry, kit_version)
        kit = size_pools(launch, hybrid=True, page_size=1).draft
        drafts = draft_layers(launch).total  # the draft's layers, whether or not the budget counts them
        runner = SimpleNamespace(spec_algorithm=launch.spec_algorithm, is_draft_worker=False,
                                 eagle_draft_num_layers=drafts)
        theirs = draft_layers_budgeted(wheels.source(version, path), "HybridSWAPoolConfigurator", runner)
        assert theirs == kit.full + kit.swa, (version, kit_version, theirs, kit)
        budgeted.append(theirs)
    assert budgeted[0] == 0 < budgeted[1], "the pair shows no draft layer coming into the budget"


def _trtllm_page_table_run(wheels, entry):
    """Each TRT-LLM kernel call's window and page table on sliding layers: the release's arguments, the kit's plan."""
    answers = []
    for version, kit_version in ((entry.releases.last_without, entry.launch.sglang_version),
                                 (entry.releases.first_with, SGLANG_VERSION)):
        theirs = trtllm_kernel_arguments(wheels.source(version, entry.releases.fix_file))
        kit: dict[str, set[tuple[bool, bool]]] = {}
        for layer in (e for p in decide(bugs.build_launch(entry, kit_version)).routes.values() for e in p.layers
                      if e.kind == "sliding"):
            kit.setdefault(layer.kernel, set()).add((layer.window_arg == layer.sliding_window_size,
                                                     layer.page_table == "swa"))
        assert theirs == kit, (version, kit_version, theirs, kit)
        answers.append(theirs)
    assert answers[0] != answers[1], "both releases pass the same window and page tables"


#: Start-up asserts: (the assert's message, what its test reads, the value asked about, the kit's answer).
ASSERT_RUNS = {
    "gemma4-aiter": ("Gemma4 only supports", "backend", "aiter", lambda v: "aiter" in gemma4_backends(v)),
    "llama4-trtllm-mha": ("required for Llama4 model", "attention_backend", "trtllm_mha",
                          lambda v: "trtllm_mha" in llama4_backends(v)),
    "unified-memory-dspark": ("--enable-unified-memory", "speculative_algorithm", "DSPARK",
                              lambda v: unified_memory_backends(SpeculativeAlgorithm.DSPARK, v) is not None),
}


def _assert_run(wheels, entry):
    message, subject, value, kit = ASSERT_RUNS[entry.releases.runs]
    answers = []
    for version, kit_version in ((entry.releases.last_without, entry.launch.sglang_version),
                                 (entry.releases.first_with, SGLANG_VERSION)):
        theirs = value in asserted_choices(wheels.source(version, entry.releases.fix_file), message, subject)
        assert theirs == kit(kit_version), (version, kit_version, value)
        answers.append(theirs)
    assert answers == [False, True], f"{value} is not refused before the fix and accepted after it"


RUNS = {"aiter-resolver": _resolver_run, "trtllm-resolver": _resolver_run, "gemma4-window": _gemma4_window_run,
        "swa-draft-budget": _draft_budget_run,
        "trtllm-page-table": _trtllm_page_table_run, **{name: _assert_run for name in ASSERT_RUNS}}


def test_every_named_decision_is_run_here():
    assert set(RUNS) == set(bugs.RELEASE_RUNS)


@pytest.mark.parametrize("entry", RUN, ids=lambda e: e.id)
def test_the_old_release_decides_as_the_kit_before_the_fix(wheels, entry):
    RUNS[entry.releases.runs](wheels, entry)
