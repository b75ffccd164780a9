"""SGLang's own resolution beside the kit: does a hybrid-SWA draft own an SWA pool, and how many of its layers go in
the target's SWA cell (``eagle_draft_swa_num_layers``)?

SGLang 0.5.23 answers through its argument parser and ``run_resolution_pipeline`` on the raw launch, then builds the
draft's ``ModelConfig`` as the draft worker does (``ModelConfig.from_server_args(..., is_draft_model=True)``) and
``resolve_spec_aux_hidden_state_config``. Runs in CI's SGLang venv (``SWA_KIT_REQUIRE_SGLANG=1``), skips elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sglang_support import require_sglang
from test_draft_hybrid_switch import CASES, DATA, DRAFT, SPEC, _launch

from swa_kit.launch.decide import decide

pytestmark = pytest.mark.sglang

_server_args, _pipeline, _base, _runtime, _model_config = require_sglang(
    "sglang.srt.server_args", "sglang.srt.arg_groups.pipeline", "sglang.srt.arg_groups.model_override_base",
    "sglang.srt.runtime_context", "sglang.srt.configs.model_config")
MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def _sglang_draft(target: str, extra: str, tmp: Path) -> tuple[bool, int]:
    """(the draft's ModelConfig.is_hybrid_swa, eagle_draft_swa_num_layers) as SGLang resolves the launch."""
    from swa_kit.launch.sglang_oracle import PLATFORM_FACTS, _spec_aux, hidden_aiter

    source = DATA / f"{target}.json" if (DATA / f"{target}.json").exists() else MODELS / f"{target}.json"
    raw = json.loads(source.read_text())
    for name, config in (("m", raw.get("hf_config", raw)), ("d", json.loads(DRAFT.read_text()))):
        (tmp / name).mkdir()
        (tmp / name / "config.json").write_text(json.dumps(config))
    argv = ["--model-path", str(tmp / "m"), *SPEC.split(), "--speculative-draft-model-path", str(tmp / "d"),
            *extra.split(), "--skip-tokenizer-init", "--device", "cuda"]
    with _runtime.override_platform(**PLATFORM_FACTS["rocm-gfx942"]), hidden_aiter():
        sa = _server_args.prepare_server_args(argv)
        _pipeline.run_resolution_pipeline(sa)
        mc = _base.model_config_of(sa)
        _runtime.publish(sa, role="scheduler", ranks=_runtime.SpawnRanks(world_rank=0, gpu_id=0))
        draft = _model_config.ModelConfig.from_server_args(sa, model_path=str(tmp / "d"), is_draft_model=True)
        _, aux = _spec_aux(sa, mc)
    return bool(draft.is_hybrid_swa), int(aux.eagle_draft_swa_num_layers or 0)


@pytest.mark.parametrize(("target", "extra"), [(t, "") for t in sorted(CASES)] +
                         [("gpt-oss-20b", "--disable-hybrid-swa-memory")])
def test_kit_draft_pool_matches_sglang(target, extra, tmp_path):
    sglang_hybrid, sglang_swa = _sglang_draft(target, extra, tmp_path)
    d = decide(_launch(target, extra))
    assert d.draft_pool.value.pool.startswith("own SWA pool") == sglang_hybrid, d.draft_pool.value.pool
    assert d.pools.draft.swa == sglang_swa
    if not extra:  # the hand-worked expectation and SGLang agree too, so neither side is wrong in the same way
        assert (sglang_hybrid, sglang_swa) == CASES[target]
