"""SWA eviction at decode, per speculative algorithm, on SGLang 0.5.23 and before-34924.

Oracles: SGLang's own ``SpeculativeAlgorithm.is_dflash_family()`` and the source of each decode preparation
``spec_prepare_for_decode`` routes to (SGLang-marked), and the pool sizes the audit reports for the numbers.
"""

from __future__ import annotations

import inspect

import pytest

from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm, decode_evicts_swa
from swa_kit.launch.inputs import Launch
from swa_kit.measure.audit import Audit, audit
from swa_kit.sglang_versions import SGLANG_VERSION, before

TITLE = "out-of-window SWA slots are never freed"
DFLASH_FAMILY = {"DFLASH", "DSPARK"}


def test_only_the_dflash_family_loses_eviction_before_34924():
    for algorithm in SpeculativeAlgorithm:
        assert decode_evicts_swa(algorithm, SGLANG_VERSION)
        assert decode_evicts_swa(algorithm, before(38756))
        assert decode_evicts_swa(algorithm, before(34924)) == (algorithm.name not in DFLASH_FAMILY), algorithm


def _eviction_findings(model: str, args: str, version: str) -> tuple[Audit, list]:
    if "DFLASH" in args:  # SGLang refuses DFLASH without its draft's path (speculative_hook.py _handle_dflash)
        args += " --speculative-draft-model-path DRAFT"
    report = audit(Launch.from_inputs(model=model, server_args=args, sglang_version=version, platform="cuda-sm90"))
    return report, [f for f in report.findings if f.title.startswith(TITLE)]


@pytest.mark.parametrize("algorithm", sorted(DFLASH_FAMILY))
@pytest.mark.parametrize("ratio", [0.1, 0.5])
def test_the_finding_quotes_the_pools_it_fills(algorithm, ratio):
    args = f"--speculative-algorithm {algorithm} --swa-full-tokens-ratio {ratio}"
    report, found = _eviction_findings("gpt-oss-120b", args, before(34924))
    pools = report.decisions.pools
    assert len(found) == 1 and found[0].severity == "memory" and algorithm in found[0].title
    assert pools.swa_tokens == int(pools.full_tokens * ratio)  # pages of 1: the configurator's split
    assert f"SWA pool ({pools.swa_tokens:,} tokens)" in found[0].detail
    assert _eviction_findings("gpt-oss-120b", args, SGLANG_VERSION)[1] == []


@pytest.mark.parametrize("model, args", [
    ("gpt-oss-120b", "--speculative-algorithm DFLASH --disable-hybrid-swa-memory"),  # no SWA pool to fill
    ("gemma3-27b", "--speculative-algorithm DFLASH"),  # SGLang gives Gemma-3 no hybrid pool
    ("gpt-oss-120b", "--speculative-algorithm EAGLE3"),  # eagle_prepare_for_decode evicts
])
def test_no_finding_without_a_dflash_decode_over_an_swa_pool(model, args):
    assert _eviction_findings(model, args, before(34924))[1] == []


@pytest.mark.sglang
def test_the_family_and_the_eviction_calls_are_sglangs():
    from sglang_support import require_sglang

    spec_info, dflash_info, eagle_utils = require_sglang("sglang.srt.speculative.spec_info",
                                                         "sglang.srt.speculative.dflash_info_v2",
                                                         "sglang.srt.speculative.eagle_utils")
    family = {a.name for a in spec_info.SpeculativeAlgorithm if a.is_dflash_family()}
    assert family == {a.name for a in SpeculativeAlgorithm if a.traits.dflash_family} == DFLASH_FAMILY
    dflash = dflash_info.DFlashDraftInputV2.prepare_for_decode
    eagle = eagle_utils.eagle_prepare_for_decode
    for prepare in (dflash, eagle):
        assert "batch.maybe_evict_swa()" in inspect.getsource(prepare)
    assert "decode_batch_idx += 1" in inspect.getsource(dflash)
