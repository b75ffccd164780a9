"""The Markdown report is a bug report: parsed with markdown-it-py, its structure is checked, not its strings."""

from __future__ import annotations

import hashlib
import json

import pytest
from markdown_it import MarkdownIt

from swa_kit.cli import main
from swa_kit.launch.inputs import Launch, parse_server_args
from swa_kit.measure import bugs
from swa_kit.measure.audit import ReportContext, audit, render, route_verdict, server_args_line
from swa_kit.models.configs import MODELS_DIR

GEMMA4 = ["--model", "gemma4-31b", "--server-args", "--attention-backend aiter --page-size 16",
          "--env", "SGLANG_USE_AITER_UNIFIED_ATTN=1"]


def _tokens(text: str) -> list:
    return MarkdownIt("commonmark").enable("table").parse(text)


def _findings_items(tokens: list) -> list[list]:
    """Each top-level item of the ordered list under "Findings": the tokens inside it."""
    start = next(i for i, t in enumerate(tokens) if t.type == "inline" and t.content.startswith("Findings"))
    ordered = next(i for i in range(start, len(tokens)) if tokens[i].type == "ordered_list_open")
    items, depth, current = [], 0, None
    for token in tokens[ordered + 1:]:
        if token.type == "ordered_list_close" and depth == 0:
            break
        if token.type == "list_item_open" and depth == 0:
            current = []
            items.append(current)
        depth += token.nesting if token.type in ("list_item_open", "list_item_close") else 0
        if current is not None:
            current.append(token)
    return items


def test_markdown_nests_each_findings_detail_and_ways_out(capsys):
    assert main(["audit", *GEMMA4, "--markdown"]) == 1
    text = capsys.readouterr().out
    tokens = _tokens(text)
    items = _findings_items(tokens)
    assert items
    for item in items:
        nested = [t for t in item if t.type == "bullet_list_open"]
        assert nested, "each finding holds a list: its detail and ways out"
        children = [t.content for t in item if t.type == "inline"][1:]
        assert any(c.startswith(("way out:", "ways out")) for c in children), children
    # the versions, the command and the config hash are list items of the first section
    inline = [t.content for t in tokens if t.type == "inline"]
    assert any(c.startswith("transformers: ") for c in inline) and any(c.startswith("swa-kit: ") for c in inline)
    sha = hashlib.sha256((MODELS_DIR / "gemma4-31b.json").read_bytes()).hexdigest()
    assert any(sha in c and "gemma4-31b.json" in c for c in inline)
    fences = {t.info: t.content for t in tokens if t.type == "fence"}
    assert fences["sh"].startswith("swa-kit audit --model gemma4-31b")
    args = parse_server_args(fences["text"])  # the launch line reads back as the launch audited
    assert args.attention_backend == "aiter" and args.page_size == 16
    assert not any("{'" in c for c in inline), "no Python dict repr in the report"
    assert any(t.type == "table_open" for t in tokens)


def test_the_launch_line_reads_back_into_the_same_fields():
    for text in ("--attention-backend aiter --page-size 16 --swa-full-tokens-ratio 0.5 --disable-radix-cache",
                 "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
                 "--speculative-num-draft-tokens 4 --mem-fraction-static 0.8"):
        args = parse_server_args(text)
        again = parse_server_args(server_args_line(args, "some/model"))
        assert again == __import__("dataclasses").replace(args, model_path="some/model")


@pytest.mark.parametrize("model", ["gemma4-31b", "gpt-oss-20b", "gemma3-27b"])
@pytest.mark.parametrize("server_args", ["--attention-backend aiter", "--attention-backend triton", None])
def test_the_route_tables_kit_column_agrees_with_the_findings(model, server_args):
    report = audit(Launch.from_inputs(model=model, server_args=server_args,
                                      env={"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}))
    flagged = {f"{w} {m}" for (w, m), plan in report.decisions.routes.items()
               for e in plan.layers if route_verdict(e) != "ok"}
    route_findings = [f for f in report.findings if f.severity in ("wrong", "raises", "one-short")
                      and f.where not in ("start-up", "pools")]
    named = {place for f in route_findings for place in f.where.rsplit(" (", 1)[0].split(", ")}
    assert flagged == named


def test_gemma4_default_decode_is_one_key_short_in_the_table_too(capsys):
    assert main(["audit", "--model", "gemma4-31b", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    short = [f for f in report["findings"] if f["severity"] == "one-short"]
    rows = [r for r in report["routes"] if r["keys"] != "all" and len(set(r["keys"].split("/"))) == 2]
    assert short and rows and all(r["kit"] == "ONE KEY SHORT" for r in rows)


def test_known_bugs_are_named_under_their_finding():
    # a launch SGLang refuses at start-up gets no report to name a bug under
    corpus = [e for e in bugs.load_corpus() if not e.gap and e.finding_class != "startup-refusal"
              and e.engine == "sglang"]
    for entry in corpus[:6]:
        report = audit(bugs.build_launch(entry))
        matches = bugs.match(report)
        context = ReportContext(known_bugs={m.finding: m.lines() for m in matches})
        hit = next((m for m in matches if entry in m.entries), None)
        assert hit is not None, entry.id
        items = _findings_items(_tokens(render(report, markdown=True, context=context)))
        index = report.findings.index(hit.finding)
        texts = [t.content for t in items[index] if t.type == "inline"]
        assert "known bugs:" in texts and any(entry.label in t for t in texts)
