"""``--enable-unified-memory`` in the kit: the boot split, the buffer, the fused draft and the refusals.

The oracles here are written from SGLang 0.5.23's source independently of the kit's code: a brute-force scan of
``_max_unified_full_tokens``'s allocation (``model_executor/pool_configurator.py``), ``MHASubPoolSpec.entry_bytes``'s
32-byte entries (``mem_cache/unified_memory_pool.py``), and the placement rules of
``mem_cache/layout/fused_draft.py``. tests/test_unified_memory_sglang.py holds the same launches against SGLang's
own ``KVCacheConfigurator``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from swa_kit.errors import LaunchRefusedError, NotModelledError
from swa_kit.launch.decide import decide
from swa_kit.launch.inputs import Launch
from swa_kit.launch.unified_memory import FusedDraft, UnifiedCells, max_full_tokens
from swa_kit.measure.audit import audit

DATA = Path(__file__).parent / "data" / "differential"
DRAFT_LLAMA = DATA / "draft-llama-2l.json"  # 2 full layers, 8 KV heads x 128
DRAFT_SWA = DATA / "draft-gpt-oss-2l.json"  # GPT-OSS shape: 1 sliding (128) + 1 full layer, 8 KV heads x 64
UNIFIED = "--enable-unified-memory --attention-backend triton"
EAGLE = "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 " \
        "--speculative-num-draft-tokens 4"


def _decide(args: str, model: str = "gpt-oss-20b", platform: str = "cuda-sm90", draft: Path | None = None):
    return decide(Launch.from_inputs(model=model, server_args=args, platform=platform, draft_hf_config=draft))


def _scan(full_bpt: int, swa_bpt: int, ratio: float, draft_bpt: int, budget: int, page: int) -> int:
    """The most full tokens whose allocation fits, found by walking page by page (no bisection)."""
    def allocation(full: int) -> int:
        swa = int(full * ratio) // page * page
        target = full * full_bpt + swa * swa_bpt
        span = max(target // full_bpt - 1, 0)
        return target + (-(-span // page) * page + page) * draft_bpt

    full = 0
    while allocation(full + page) <= budget:
        full += page
    return full


def test_the_bisection_finds_what_a_page_by_page_scan_finds():
    draw = random.Random(34)
    for _ in range(200):
        cells = UnifiedCells(full_per_token=draw.choice([256, 1024, 4096]), swa_per_token=draw.choice([256, 2048]),
                             full_layers=draw.randint(1, 6), swa_layers=draw.randint(1, 6),
                             draft_per_token=draw.choice([0, 0, 512, 3000]), fused=None)
        page, ratio = draw.choice([1, 16, 64]), draw.choice([0.8, 0.5, 0.1, 1.0])
        budget = draw.randint(0, 40_000_000)
        want = _scan(cells.full_per_token * cells.full_layers, cells.swa_per_token * cells.swa_layers, ratio,
                     cells.draft_per_token, budget, page)
        assert max_full_tokens(cells, budget, page, ratio) == want, (cells, page, ratio, budget)


def test_entries_are_rounded_to_32_bytes_and_a_fused_region_follows_the_host_rows_at_16():
    cells = UnifiedCells(1000, 500, 3, 2, 0, None)
    assert (cells.full_entry, cells.swa_entry) == (3008, 1024)  # 3000 -> 3008, 1000 -> 1024
    fused = UnifiedCells(1000, 500, 3, 2, 0, FusedDraft({"full": 1}, {"full": 40}, ""))
    assert fused.full_entry == 3072 and fused.swa_entry == 1024  # 3000 -> 3008 (16-B offset), + 40 = 3048 -> 3072
    assert fused.full_bytes_per_token == fused.full_entry


def test_gpt_oss_without_speculation_fills_the_budget_and_keeps_no_floor():
    d = _decide(UNIFIED)
    unified, budget = d.unified_memory.value, d.pools.budget_bytes
    per_token = 12 * 8 * (64 + 64) * 2  # 12 full (and 12 sliding) layers x 8 KV heads x (K + V) x bf16
    assert unified["entry_bytes"] == {"full": per_token, "swa": per_token}
    full, swa = d.full_tokens.value, d.swa_tokens.value
    assert swa == int(full * 0.8) and full * per_token + swa * per_token <= budget
    assert (full + 1) * per_token + int((full + 1) * 0.8) * per_token > budget  # the most that fits
    total = budget - budget % 4096  # the whole budget floored to 4096 B, without speculation
    assert unified["total_bytes"] == total
    assert unified["max_slots"] == {"full": total // per_token, "swa": total // per_token}  # either side, alone
    assert d.swa_pool_floor.value is None and "skips validate_swa_pool_size" in d.swa_pool_floor.source
    # a ratio the static pools refuse (SWA pool under its floor) starts under unified memory
    tiny = "--swa-full-tokens-ratio 0.00000001"
    assert "validate_swa_pool_size" in _decide(f"--attention-backend triton {tiny}").pools.refused
    assert _decide(f"{UNIFIED} {tiny}").pools.refused is None


def test_tensor_parallelism_splits_each_entry_per_gpu():
    one, two = (_decide(f"{UNIFIED} --tp {tp}", model="gemma4-31b", platform="cuda-sm100") for tp in (1, 2))
    assert {k: v // 2 for k, v in one.unified_memory.value["entry_bytes"].items()} == \
        two.unified_memory.value["entry_bytes"]


def test_an_eagle_draft_rides_in_the_full_entries():
    d = _decide(f"{UNIFIED} {EAGLE}", draft=DRAFT_LLAMA)
    unified = d.unified_memory.value
    assert unified["draft_lanes"] == {"full": 2}
    assert unified["entry_bytes"] == {"full": 24576 + 2 * 8 * (128 + 128) * 2, "swa": 24576}
    assert d.draft_pool.value.pool.startswith("fused into the target's unified pool (UnifiedDraftKVPool")
    assert "the target's slot ids and page table" in d.draft_pool.value.pool
    assert d.draft_layers_in_pool.value == {"full": 0, "swa": 0}  # priced in the entry, not as draft layers
    assert unified["total_bytes"] == d.full_tokens.value * 32768 + d.swa_tokens.value * 24576  # the solved bytes


def test_a_hybrid_swa_draft_binds_the_swa_pool_on_triton_and_is_refused_off_the_window_rail():
    d = _decide(f"{UNIFIED} {EAGLE}", draft=DRAFT_SWA)
    assert d.unified_memory.value["draft_lanes"] == {"swa": 1, "full": 1}
    assert "UnifiedDraftSWAKVPool" in d.draft_pool.value.pool
    assert d.unified_memory.value["entry_bytes"] == {"full": 24576 + 2048, "swa": 24576 + 2048}
    with pytest.raises(LaunchRefusedError, match=r"carries no per-step sliding-window rail .*_fused_draft_for_swa"):
        _decide(f"--enable-unified-memory --attention-backend fa3 {EAGLE}", draft=DRAFT_SWA)


def test_eagle_without_a_draft_the_target_can_fuse_is_refused_or_named():
    with pytest.raises(LaunchRefusedError, match="cannot fuse .fusion does not apply to it"):
        _decide(f"{UNIFIED} {EAGLE}")  # GPT-OSS has no MTP layers, and no draft path is given
    with pytest.raises(NotModelledError, match="EAGLE draft, whose config is not read"):
        _decide(f"{UNIFIED} {EAGLE} --speculative-draft-model-path /drafts/eagle")
    report = audit(Launch.from_inputs(model="gpt-oss-20b", server_args=f"{UNIFIED} {EAGLE} "
                                      "--speculative-draft-model-path /drafts/eagle", platform="cuda-sm90"))
    assert any("is not modelled: this audit sizes the unified buffer without the fused draft" in f.title
               for f in report.findings)


def test_a_buffer_under_the_bs1_floor_is_refused():
    with pytest.raises(LaunchRefusedError, match=r"cannot fit one worst-case request \(bs=1 floor"):
        _decide(f"{UNIFIED} --max-total-tokens 64")
    assert _decide(f"{UNIFIED} --max-total-tokens 4096").unified_memory.value["total_bytes"] == \
        4096 * 24576 + int(4096 * 0.8) * 24576


def test_the_audit_reports_one_buffer_and_not_the_static_split():
    report = audit(Launch.from_inputs(model="gpt-oss-20b", server_args=UNIFIED, platform="cuda-sm90"))
    titles = [f.title for f in report.findings]
    assert any(t.startswith("one unified buffer of 61.4 GiB per GPU") for t in titles), titles
    assert not any(t.startswith("the hybrid pool saves") for t in titles)  # the ratio is only the boot split
    static = audit(Launch.from_inputs(model="gpt-oss-20b", server_args="--attention-backend triton",
                                      platform="cuda-sm90"))
    assert any(f.title.startswith("the hybrid pool saves") for f in static.findings)


def test_unified_memory_needs_the_hybrid_pool_on():
    """ModelConfig.is_hybrid_swa reads the resolved --disable-hybrid-swa-memory: no hybrid pool, nothing to unify."""
    with pytest.raises(LaunchRefusedError, match=r"GptOssForCausalLM \(hybrid SWA memory off by "
                                                 r"--disable-hybrid-swa-memory\)\) is neither"):
        _decide(f"{UNIFIED} --disable-hybrid-swa-memory")
    with pytest.raises(LaunchRefusedError, match="EAGLE needs a hybrid-SWA"):
        _decide(f"{UNIFIED} --disable-hybrid-swa-memory {EAGLE}", draft=DRAFT_LLAMA)


def test_a_path_less_mtp_draft_is_the_targets_mtp_form_fused_into_the_swa_entries():
    """MiMo-V2's EAGLE without a draft path: SGLang rewrites the target to MiMoV2MTP (one sliding layer), whose window
    (ModelConfig.sliding_window_size) fits the target's, so on triton it rides in the SWA entries."""
    d = _decide(f"{UNIFIED} --tp 8 {EAGLE}", model="mimo-v2-flash")
    assert d.unified_memory.value["draft_lanes"] == {"swa": 1}
    assert d.draft_pool.value.layout.architecture == "MiMoV2MTP"
    plain = _decide(f"{UNIFIED} --tp 8", model="mimo-v2-flash").unified_memory.value["entry_bytes"]
    assert d.unified_memory.value["entry_bytes"]["full"] == plain["full"]
    assert d.unified_memory.value["entry_bytes"]["swa"] > plain["swa"]


DFLASH = EAGLE.replace("EAGLE ", "DFLASH ", 1)
DSPARK = EAGLE.replace("EAGLE ", "DSPARK ", 1)


def test_a_dflash_family_draft_rides_in_the_full_entries_as_one_block():
    """``_fused_draft_decision`` takes DFLASH and DSPARK drafts too: their lanes are the draft's layers (one block,
    ``num_depths=1``), their rows join the target's full entries, and the draft keeps no pool of its own."""
    for algorithm, draft in ((DFLASH, DRAFT_LLAMA), (DSPARK, DATA / "draft-dspark-2l.json")):
        d = _decide(f"{UNIFIED} {algorithm}", draft=draft)
        unified = d.unified_memory.value
        assert unified["draft_lanes"] == {"full": 2}
        assert unified["entry_bytes"] == {"full": 24576 + 2 * 8 * (128 + 128) * 2, "swa": 24576}
        assert d.draft_pool.value.pool.startswith("fused into the target's unified pool (UnifiedDraftKVPool")
        assert d.draft_layers_in_pool.value == {"full": 0, "swa": 0}  # no private draft cell beside the entries
        assert unified["total_bytes"] == d.full_tokens.value * 32768 + d.swa_tokens.value * 24576


def test_a_dflash_draft_fuses_whatever_nextn_depths_its_config_inherits(tmp_path):
    """EAGLE reads ``num_nextn_predict_layers`` as per-depth runners and refuses 2 depths on one runner; a DFLASH
    draft is one block whatever its config says (``draft_kv_profile(num_depths=1)``)."""
    raw = json.loads(DRAFT_LLAMA.read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "num_nextn_predict_layers": 2}))
    assert _decide(f"{UNIFIED} {DFLASH}", draft=tmp_path / "config.json").unified_memory.value["draft_lanes"] == \
        {"full": 2}
    with pytest.raises(LaunchRefusedError, match=r"per-depth draft head \(2 depths\)"):
        _decide(f"{UNIFIED} {EAGLE}", draft=tmp_path / "config.json")


def test_a_declined_dflash_draft_keeps_a_private_pool_priced_in_the_boot_split():
    """Off the triton rail a window draft cannot fuse: EAGLE is refused, DFLASH keeps its own pool, which the boot
    split prices at the draft's own bytes per token over the virtual id span (``_draft_pool_bytes_per_token``)."""
    d = _decide(f"--enable-unified-memory --attention-backend fa3 {DFLASH}", draft=DRAFT_SWA)
    unified, budget = d.unified_memory.value, d.pools.budget_bytes
    assert unified["draft_lanes"] is None and d.draft_pool.value.pool.startswith("own")
    assert "fused draft KV disabled" in d.pools.draft.how and "sliding-window rail" in d.pools.draft.how
    per_token, draft_cell = 12 * 8 * (64 + 64) * 2, 2 * 8 * (64 + 64) * 2  # the draft: 2 layers x 8 x 64 x bf16
    assert d.full_tokens.value == _scan(per_token, per_token, 0.8, draft_cell, budget, 1)
    assert unified["entry_bytes"] == {"full": per_token, "swa": per_token}


def test_an_fa4_dflash_family_region_keeps_the_drafts_compute_dtype():
    """``allow_target_draft_different_cache_dtype``: on fa4 the fused region is in the draft's bf16 while the
    target's rows are fp8 (1 byte)."""
    d = _decide(f"--enable-unified-memory --attention-backend fa4 --kv-cache-dtype fp8_e4m3 {DSPARK}",
                platform="cuda-sm100", draft=DATA / "draft-dspark-2l.json")
    assert d.unified_memory.value["entry_bytes"]["full"] == 12 * 8 * (64 + 64) * 1 + 2 * 8 * (128 + 128) * 2


def test_the_guides_dflash_family_figures_are_the_kits():
    """swa_kit/docs/sglang-and-aiter.md quotes the fused DFLASH-family entries and the declined draft's split."""
    guide = " ".join((Path(__file__).parents[1] / "swa_kit" / "docs" / "sglang-and-aiter.md").read_text().split())
    fused = {_decide(f"{UNIFIED} {algorithm}", draft=draft).unified_memory.value["entry_bytes"]["full"]
             for algorithm, draft in ((DFLASH, DRAFT_LLAMA), (DSPARK, DATA / "draft-dspark-2l.json"),
                                      (EAGLE, DRAFT_LLAMA))}
    assert len(fused) == 1 and f"the same full entry of {fused.pop():,} B as under EAGLE" in guide
    declined = _decide(f"--enable-unified-memory --attention-backend fa3 {DFLASH}", draft=DRAFT_SWA)
    unified = declined.unified_memory.value
    assert f"so the entries stay at {unified['entry_bytes']['full']:,} B, the boot split is " \
           f"{declined.full_tokens.value:,} full tokens and the buffer {unified['total_bytes']:,} B" in guide
    fa4 = _decide(f"--enable-unified-memory --attention-backend fa4 --kv-cache-dtype fp8_e4m3 {DSPARK}",
                  platform="cuda-sm100", draft=DATA / "draft-dspark-2l.json")
    assert f"bf16 draft rows: {fa4.unified_memory.value['entry_bytes']['full']:,} B" in guide


def test_dflash_keeps_trtllm_mha_only_for_an_all_sliding_or_causal_draft(tmp_path):
    """``_resolve_dflash_draft_attention_backend``: a trtllm_mha draft backend stays only where the draft's layers
    are all sliding or it is causal; else it falls back (fa4 on SM100, flashinfer on SM90). On fa4 the fused region
    is the draft's bf16 (2 B); elsewhere the target's fp8 (1 B)."""
    args = f"--enable-unified-memory --attention-backend trtllm_mha --kv-cache-dtype fp8_e4m3 {DFLASH}"
    target, draft_rows = 12 * 8 * (64 + 64), 2 * 8 * (128 + 128)  # bytes per element of each, per slot
    causal = tmp_path / "config.json"
    causal.write_text(json.dumps({**json.loads(DRAFT_LLAMA.read_text()), "is_causal": True}))
    for platform, draft, backend, element in (("cuda-sm100", DRAFT_LLAMA, "fa4", 2),
                                              ("cuda-sm90", DRAFT_LLAMA, "flashinfer", 1),
                                              ("cuda-sm100", causal, "trtllm_mha", 1)):
        d = _decide(args, platform=platform, draft=draft)
        assert d.draft_pool.value.backend == backend
        assert d.unified_memory.value["entry_bytes"]["full"] == target + draft_rows * element


def test_the_guides_unified_memory_figures_are_the_kits():
    """The GPT-OSS 20B example of swa_kit/docs/sglang-and-aiter.md: the boot split, entries, buffer and draft."""
    guide = " ".join((Path(__file__).parents[1] / "swa_kit" / "docs" / "sglang-and-aiter.md").read_text().split())
    plain = decide(Launch.from_inputs(model="gpt-oss-20b", server_args=UNIFIED, platform="cuda-sm90"))
    buffer = plain.unified_memory.value
    assert buffer["entry_bytes"]["full"] == buffer["entry_bytes"]["swa"]
    assert buffer["max_slots"]["full"] == buffer["max_slots"]["swa"]
    assert (f"full and SWA entries of {buffer['entry_bytes']['full']:,} B, a boot split of "
            f"{plain.full_tokens.value:,} full and {plain.swa_tokens.value:,} SWA tokens, and a buffer of "
            f"{buffer['total_bytes']:,} B in which either side alone fits {buffer['max_slots']['full']:,} "
            "slots") in guide
    drafted = decide(Launch.from_inputs(model="gpt-oss-20b", server_args=f"{UNIFIED} {EAGLE}", platform="cuda-sm90",
                                        draft_hf_config=DRAFT_LLAMA))
    assert (f"the full entry grows to {drafted.unified_memory.value['entry_bytes']['full']:,} B and the boot split "
            f"to {drafted.full_tokens.value:,} full tokens") in guide
