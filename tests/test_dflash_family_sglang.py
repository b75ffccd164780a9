"""DFLASH, DSPARK, UNO and the draft sink held against SGLang 0.5.23's own code (its parser, resolution, spec-aux
resolution, pool configurator with ``resolve_dflash_draft_cell_size``, and its aiter backend), on launches drawn
fresh beside the differential's fixed set (tests/differential.py)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from sglang_support import require_sglang

(spec_info,) = require_sglang("sglang.srt.speculative.spec_info")

sys.path.insert(0, str(Path(__file__).parent))
import differential  # noqa: E402
from swa_kit.engine.spec_algorithms import SpeculativeAlgorithm  # noqa: E402
from swa_kit.launch.sglang_oracle_spec import runs_a_draft_model  # noqa: E402
from swa_kit.measure import sglang_check  # noqa: E402

pytestmark = pytest.mark.sglang
STEPS = "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"


def test_the_kits_draft_model_trait_is_sglangs_worker():
    """UNO and NGRAM run no draft model (their worker's ``draft_worker`` is None); every other algorithm does."""
    for algorithm in (a for a in spec_info.SpeculativeAlgorithm if a.is_some()):
        assert runs_a_draft_model(algorithm) == SpeculativeAlgorithm[algorithm.name].traits.draft_model, algorithm


def _draw(rng: random.Random) -> tuple[str, str, str]:
    algorithm, draft = rng.choice([("DFLASH", "DRAFT"), ("DSPARK", "DRAFT_DSPARK")])
    platform, backend = rng.choice([("rocm-gfx950", "aiter"), ("rocm-gfx942", "aiter"), ("cuda-sm90", "triton"),
                                    ("cuda-sm90", "fa3")])
    words = [f"--speculative-algorithm {algorithm} {STEPS} --speculative-draft-model-path {draft}",
             f"--attention-backend {backend}", f"--tp {rng.choice([1, 2, 4, 8])}",
             f"--swa-full-tokens-ratio {rng.choice(['0.2', '0.5', '0.8'])}"]
    if rng.random() < 0.3:
        words.append("--kv-cache-dtype fp8_e4m3")
    if rng.random() < 0.3:
        words.append("--disable-hybrid-swa-memory")
    if rng.random() < 0.3:
        words.append(f"--page-size {rng.choice([16, 64])}")
    if rng.random() < 0.3:  # the handler's 48 running requests then cap the SWA pool
        words.append("--disable-radix-cache")
    return rng.choice(["gpt-oss-20b", "gpt-oss-120b", "gemma4-31b"]), platform, " ".join(words)


@pytest.mark.parametrize("seed", range(8))
def test_dflash_family_launches_agree_field_by_field(seed):
    """Pools (the draft priced by SGLang's own resolve_dflash_draft_cell_size), draft layers, draft pool and the
    target's aiter routes, or the refusal, on a launch drawn afresh."""
    case = _draw(random.Random(f"dflash-{seed}"))
    kit = sglang_check.Side(*differential.kit_answer(*case))
    sglang = sglang_check.Side(*differential.sglang_answer(*case))
    assert sglang_check.differences(kit, sglang) == {}, case
    if not sglang.refused:
        assert sglang.fields["draft_layers"] == 2 and sglang.fields["full_tokens"], case


@pytest.mark.parametrize("backend", ["triton", "fa3", "aiter"])
def test_a_draft_sink_launch_agrees(backend):
    platform = "rocm-gfx950" if backend == "aiter" else "cuda-sm90"
    case = ("gpt-oss-20b", platform, f"--speculative-algorithm EAGLE {STEPS} --speculative-draft-model-path DRAFT "
                                     f"--speculative-draft-window-size {random.randint(8, 256)} "
                                     f"--speculative-draft-sink-size {random.randint(0, 16)} --attention-backend "
                                     f"{backend}")
    kit = sglang_check.Side(*differential.kit_answer(*case))
    assert sglang_check.differences(kit, sglang_check.Side(*differential.sglang_answer(*case))) == {}, case
