"""``--enable-unified-memory`` held against SGLang 0.5.23's own code, field by field.

SGLang answers through :func:`swa_kit.measure.sglang_check.sglang_side` on the raw command line: its parser and
resolution, then its real ``KVCacheConfigurator`` on the meta device (:mod:`swa_kit.launch.sglang_unified`):
``config_from_budget`` (the boot split and ``unified_total_bytes``), ``_fused_draft_decision`` and ``_init_pools`` up to
where ``UnifiedKVPool`` would allocate the buffer (entries, fused lanes, the bs=1 floor, the refusals). Runs in CI's
SGLang venv (``SWA_KIT_REQUIRE_SGLANG=1``), skips elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sglang_support import require_sglang

from swa_kit.errors import SwaKitError
from swa_kit.launch.decide import decide
from swa_kit.launch.inputs import Launch, Platform
from swa_kit.measure import sglang_check

pytestmark = pytest.mark.sglang
require_sglang("sglang.srt.mem_cache.kv_cache_configurator", "sglang.srt.mem_cache.unified_memory_pool")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "differential"
DRAFTS = {"llama": DATA / "draft-llama-2l.json", "swa": DATA / "draft-gpt-oss-2l.json"}
EAGLE = "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 " \
        "--speculative-num-draft-tokens 4"
COMPARED = ("full_tokens", "swa_tokens", "swa_pool_floor", "pool_configurator", "unified_pool", "draft_pool")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    """Each config in a directory of its own, as SGLang reads a model path; the targets' model classes built once."""
    from swa_kit.launch.sglang_oracle import built_models_apart

    root = tmp_path_factory.mktemp("unified")
    out = {}
    for name, path in {"gpt-oss-20b": ROOT / "data" / "models" / "gpt-oss-20b.json",
                       "gemma3-27b": ROOT / "data" / "models" / "gemma3-27b.json",
                       "mimo-v2-flash": ROOT / "data" / "models" / "mimo-v2-flash.json", **DRAFTS}.items():
        raw = json.loads(path.read_text())
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(raw.get("hf_config", raw)))
        out[name] = root / name
    targets = [str(out[name]) for name in ("gpt-oss-20b", "gemma3-27b", "mimo-v2-flash")]
    out["built"] = built_models_apart(targets)  # type: ignore[assignment]
    return out


def _both(dirs, model: str, args: str, draft: str | None = None, platform: str = "cuda-sm90"):
    """(kit, SGLang) answers for one launch: each side's refusal, or its compared fields."""
    memory = Platform.parse(platform).gpu_memory_bytes
    try:
        launch = Launch.from_inputs(model=model, server_args=args, platform=platform,
                                    draft_hf_config=None if draft is None else DRAFTS[draft])
        kit = sglang_check.kit_side(launch, decide(launch))
    except SwaKitError as error:
        kit = sglang_check.Side(f"{type(error).__name__}: {error}", {})
    argv = ["--model-path", str(dirs[model]), *args.split()]
    if draft is not None:
        argv += ["--speculative-draft-model-path", str(dirs[draft])]
    sglang = sglang_check.sglang_side(argv, platform, memory, dirs["built"][str(dirs[model])])
    return kit, sglang


@pytest.mark.parametrize(("args", "draft"), [
    ("--enable-unified-memory --attention-backend triton", None),
    ("--enable-unified-memory --attention-backend triton --page-size 64 --tp 2", None),
    ("--enable-unified-memory --attention-backend fa3 --swa-full-tokens-ratio 0.3", None),
    (f"--enable-unified-memory --attention-backend triton {EAGLE}", "llama"),
    (f"--enable-unified-memory --attention-backend triton {EAGLE} --page-size 16", "swa"),
])
def test_the_buffer_and_the_fused_draft_are_sglangs(dirs, args, draft):
    kit, sglang = _both(dirs, "gpt-oss-20b", args, draft)
    _agree(kit, sglang)


def _agree(kit, sglang) -> None:
    assert kit.refused is None and sglang.refused is None, (kit.refused, sglang.refused)
    assert sglang.fields["unified_pool"]["total_bytes"] > 0  # SGLang reached the buffer: the check compares
    assert {f: kit.fields[f] for f in COMPARED} == {f: sglang.fields[f] for f in COMPARED}


def test_a_path_less_mtp_draft_is_fused_as_sglang_fuses_it(dirs):
    """MiMo-V2 without a draft path: SGLang's draft is its config rewritten to MiMoV2MTP, fused into the SWA
    entries."""
    kit, sglang = _both(dirs, "mimo-v2-flash", f"--enable-unified-memory --attention-backend triton --tp 8 {EAGLE}")
    _agree(kit, sglang)
    assert sglang.fields["unified_pool"]["draft_lanes"] == {"swa": 1}


@pytest.mark.parametrize(("model", "args", "draft", "sglang_says"), [
    # the pool build (kv_cache_configurator.py _init_pools) refuses a model without a hybrid pool, in these words
    ("gemma3-27b", "--enable-unified-memory --attention-backend triton", None,
     "only supports hybrid Mamba and hybrid sliding-window-attention models"),
    # an EAGLE target without MTP layers and no draft path: nothing to fuse (_fused_draft_for_swa_factory)
    ("gpt-oss-20b", f"--enable-unified-memory --attention-backend triton {EAGLE}", None, "cannot fuse"),
    # a window draft layer off the triton rail: the draft is declined, so refused
    ("gpt-oss-20b", f"--enable-unified-memory --attention-backend fa3 {EAGLE}", "swa", "cannot fuse"),
    # --disable-hybrid-swa-memory leaves no hybrid pool to unify (ModelConfig.is_hybrid_swa): refused as Gemma-3 is,
    # and with EAGLE by the hook (handle_unified_memory_pool: "requires a unified target")
    ("gpt-oss-20b", "--enable-unified-memory --attention-backend triton --disable-hybrid-swa-memory", None,
     "only supports hybrid Mamba and hybrid sliding-window-attention models"),
    ("gpt-oss-20b", f"--enable-unified-memory --attention-backend triton --disable-hybrid-swa-memory {EAGLE}",
     "llama", "requires a unified target"),
    # a buffer under init_unified_swa_pools's bs=1 floor
    ("gpt-oss-20b", "--enable-unified-memory --attention-backend triton --max-total-tokens 64", None, "bs=1 floor"),
])
def test_the_pool_builds_refusals_are_reached_in_sglangs_own_code(dirs, model, args, draft, sglang_says):
    kit, sglang = _both(dirs, model, args, draft)
    assert kit.refused and kit.refused.startswith("LaunchRefusedError"), kit
    assert sglang.refused and sglang_says in sglang.refused, sglang.refused


DFLASH = EAGLE.replace("EAGLE ", "DFLASH ", 1)


@pytest.mark.parametrize(("args", "draft", "lanes"), [
    (f"--enable-unified-memory --attention-backend triton {DFLASH}", "llama", {"full": 2}),
    (f"--enable-unified-memory --attention-backend trtllm_mha {DFLASH}", "llama", {"full": 2}),
    (f"--enable-unified-memory --attention-backend triton {DFLASH} --page-size 16", "swa", {"full": 1, "swa": 1}),
    # off the triton rail the window draft is declined, as EAGLE's is above, but DFLASH keeps a private pool
    (f"--enable-unified-memory --attention-backend fa3 {DFLASH}", "swa", None),
])
def test_a_dflash_draft_is_fused_or_declined_as_sglang_decides(dirs, args, draft, lanes):
    """_fused_draft_decision takes the DFLASH family: one block on the draft worker's backend
    (draft_worker_common.py resolve_draft_worker_attention_backend, imported here from SGLang itself)."""
    kit, sglang = _both(dirs, "gpt-oss-20b", args, draft)
    _agree(kit, sglang)
    assert sglang.fields["unified_pool"]["draft_lanes"] == lanes
