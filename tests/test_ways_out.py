"""Every way out the kit recommends, taken on the launch it is recommended for, and audited: the finding it
answers is gone, and whatever the audit still finds is the cost the way out names (one key short)."""

from __future__ import annotations

from pathlib import Path

import pytest

from generated_blocks import check_block
from swa_kit.engine.ways_out import ONE_KEY_SHORT, UNIFIED_CALL_SITE_FIX, WAYS_OUT, WayOut
from swa_kit.launch.inputs import Launch
from swa_kit.measure.audit import audit
from swa_kit.sglang_versions import BEFORE_38756, SGLANG_VERSION
from swa_kit.window import to_keys

DOCS = Path(__file__).resolve().parents[1] / "docs"
EAGLE_TREE = ("--speculative-algorithm EAGLE --speculative-eagle-topk 4 --speculative-num-steps 3 "
              "--speculative-num-draft-tokens 8")

#: Launches whose audit recommends ways out: SGLang's guard, the legacy tree verify, the seed's FROZEN_KV MTP draft.
LAUNCHES = [("gemma3-27b", "--attention-backend aiter", SGLANG_VERSION),
            ("gemma3-27b", f"--attention-backend aiter {EAGLE_TREE}", SGLANG_VERSION),
            ("gemma4-31b", f"--attention-backend aiter {EAGLE_TREE}", SGLANG_VERSION),
            ("gemma4-31b", "--attention-backend aiter --speculative-algorithm FROZEN_KV_MTP", BEFORE_38756),
            ("gpt-oss-120b", "--attention-backend aiter --disable-hybrid-swa-memory", SGLANG_VERSION)]
SEVERE = ("wrong", "raises")


def _severe(report) -> set[tuple[str, str]]:
    return {(f.severity, f.where) for f in report.findings if f.severity in SEVERE}


def _recommended() -> list[tuple[tuple[str, str, str], tuple[str, str], str]]:
    """(launch, (severity, where) of the finding, way-out text) for every way out the audits recommend."""
    out = []
    for launch in LAUNCHES:
        model, args, version = launch
        for finding in audit(Launch.from_inputs(model=model, server_args=args, sglang_version=version)).findings:
            if finding.severity in SEVERE:
                out += [(launch, (finding.severity, finding.where), way) for way in finding.ways_out]
    return out


RECOMMENDED = _recommended()
BY_TEXT = {way.text: way for way in WAYS_OUT.values()}


def test_every_launch_way_out_is_structured():
    """A way out that changes a launch (a flag or a variable) comes from the structured list, so it is tested below;
    the rest are code changes, which name no flag."""
    assert {w.name for *_, text in RECOMMENDED if (w := BY_TEXT.get(text))} == set(WAYS_OUT)
    for *_, text in RECOMMENDED:
        if text not in BY_TEXT:
            assert "--" not in text and "SGLANG_" not in text, text


@pytest.mark.parametrize("launch,finding,text", [r for r in RECOMMENDED if r[2] in BY_TEXT],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_way_out_holds_against_the_audit(launch, finding, text):
    model, args, version = launch
    way = BY_TEXT[text]
    before = audit(Launch.from_inputs(model=model, server_args=args, sglang_version=version))
    server_args, env = way.applied_to(args, {})
    after = audit(Launch.from_inputs(model=model, server_args=server_args, env=env,
                                     sglang_version=way.sglang_version or version))
    assert finding not in _severe(after), f"{way.name} leaves {finding}"
    assert _severe(after) <= _severe(before) - {finding}, f"{way.name} brings new findings"
    short = [f for f in after.findings if f.severity == "one-short"]
    if short:  # what remains is the cost the way out states
        assert way.cost == ONE_KEY_SHORT and all("one key short" in f.title for f in short), (way.name, short)


def test_a_way_out_must_name_its_cost():
    with pytest.raises(ValueError, match="must name its cost"):
        WayOut("x", "set X=1", "one key short", env={"X": "1"})
    with pytest.raises(ValueError, match="'--flag value' pairs"):
        WAYS_OUT["triton-backend"].applied_to("--attention-backend", {})


def test_applied_flags_replace_the_same_flags():
    args, env = WAYS_OUT["unified-verify"].applied_to(f"--attention-backend aiter {EAGLE_TREE}", {"A": "1"})
    assert "--speculative-eagle-topk 1" in args and "topk 4" not in args and "--attention-backend aiter" in args
    assert env == {"A": "1", **WAYS_OUT["unified-verify"].env}


def test_the_actual_fix_attends_the_whole_window():
    """(sws, 0) at the unified call sites: aiter's unified convention reads it as sws + 1 = W keys."""
    sws = 1023
    assert to_keys("aiter_unified", (sws, 0)) == sws + 1
    assert to_keys("aiter_unified", (sws - 1, 0)) == sws  # SGLang 0.5.23's argument: one key short
    assert UNIFIED_CALL_SITE_FIX["in_sglang"] == f"not in SGLang {SGLANG_VERSION}"


def ways_out_table() -> str:
    rows = ["| Way out | How | What it still costs |", "|---|---|---|"]
    for way in WAYS_OUT.values():
        how = " ".join([*(f"`{k}={v}`" for k, v in way.env.items()), *([f"`{way.server_args}`"] if way.server_args
                                                                        else []),
                        *([f"SGLang {way.sglang_version}"] if way.sglang_version else []),
                        *(f"remove `{switch}`" for switch in way.drops)])
        rows.append(f"| {way.text} | {how} | {way.cost or 'nothing'} |")
    fix = UNIFIED_CALL_SITE_FIX
    rows.append(f"| the fix: `{fix['after']}` instead of `{fix['before']}` at the unified call sites "
                f"({', '.join(fix['call_sites'])}) of `{fix['file']}` | a code change, {fix['in_sglang']} | "
                "nothing: every sliding layer attends W keys |")
    return "\n".join(rows)


def test_debugging_guide_lists_the_ways_out():
    check_block(DOCS / "debugging.md", "ways-out", ways_out_table(),
                "python -m pytest tests/test_ways_out.py -k debugging_guide")
