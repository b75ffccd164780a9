"""The unified-memory figures swa_kit/docs/sglang-and-aiter.md quotes are the kit's own answers (they cannot drift)."""

from __future__ import annotations

from pathlib import Path

from swa_kit.launch.decide import decide
from swa_kit.launch.inputs import Launch

ROOT = Path(__file__).resolve().parents[1]
ARGS = "--enable-unified-memory --attention-backend triton"
EAGLE = ("--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
         "--speculative-num-draft-tokens 4 --speculative-draft-model-path DRAFT")


def test_the_guides_unified_memory_figures_are_the_kits():
    guide = " ".join((ROOT / "swa_kit" / "docs" / "sglang-and-aiter.md").read_text().split())
    plain = decide(Launch.from_inputs(model="gpt-oss-20b", server_args=ARGS, platform="cuda-sm90"))
    buffer = plain.unified_memory.value
    quoted = (f"full and SWA entries of {buffer['entry_bytes']['full']:,} B, a boot split of "
              f"{plain.full_tokens.value:,} full and {plain.swa_tokens.value:,} SWA tokens, and a buffer of "
              f"{buffer['total_bytes']:,} B in which either side alone fits {buffer['max_slots']['full']:,} slots")
    assert quoted in guide
    assert buffer["entry_bytes"]["full"] == buffer["entry_bytes"]["swa"]
    assert buffer["max_slots"]["full"] == buffer["max_slots"]["swa"]
    drafted = decide(Launch.from_inputs(model="gpt-oss-20b", server_args=f"{ARGS} {EAGLE}", platform="cuda-sm90",
                                        draft_hf_config=ROOT / "tests/data/differential/draft-llama-2l.json"))
    assert (f"the full entry grows to {drafted.unified_memory.value['entry_bytes']['full']:,} B and the boot split "
            f"to {drafted.full_tokens.value:,} full tokens") in guide
