"""The known vLLM bugs under ``swa-kit audit --engine vllm``'s findings ("matches vLLM #28539, fixed in #29234").

An entry of the corpus (:mod:`swa_kit.measure.bugs`) with ``"engine": "vllm"`` matches a finding when the finding
shows the entry's class and the audited launch has the entry's launch facts: its vLLM version, its drafter method
where the entry has one, and a backend in common. A memory class depends on the KV-cache manager, not on the
attention backend, so for it the backend is not asked.
"""

from __future__ import annotations

from collections.abc import Sequence

from swa_kit.errors import SwaKitError
from swa_kit.launch.vllm_plan import VllmPlan
from swa_kit.measure.bugs import FINDING_CLASSES, BugEntry, LaunchFacts, Match, facts_match, finding_classes, \
    load_corpus
from swa_kit.measure.vllm_audit import VllmAudit
from swa_kit.measure.vllm_bug_launch import VllmLaunchSpec, build_plan


def plan_facts(plan: VllmPlan) -> LaunchFacts:
    """The backends of every layer kind, the ``--speculative-config`` method and the vLLM version."""
    method = (plan.args.speculative_config or {}).get("method")
    return LaunchFacts(frozenset(k.selection.backend for k in plan.kinds), method, plan.vllm_version)


def match_vllm(report: VllmAudit, corpus: Sequence[BugEntry] | None = None) -> list[Match]:
    """The known vLLM bugs under each finding of ``report``."""
    corpus = load_corpus() if corpus is None else corpus
    audited = plan_facts(report.plan)
    facts: dict[str, LaunchFacts | None] = {}
    matches = []
    for finding in report.findings:
        classes = finding_classes(finding)
        hits = []
        for entry in corpus:
            spec = entry.launch
            if entry.finding_class not in classes or not isinstance(spec, VllmLaunchSpec):
                continue
            if entry.id not in facts:
                try:
                    facts[entry.id] = plan_facts(build_plan(spec, f"{entry.id}.json"))
                except SwaKitError:  # a launch the kit refuses shares no facts with one it audited
                    facts[entry.id] = None
            known = facts[entry.id]
            if known is None:
                continue
            if FINDING_CLASSES[entry.finding_class].severity == "memory":
                known = LaunchFacts(audited.backends, known.speculation, known.version)
            if facts_match(known, audited):
                hits.append(entry)
        if hits:
            matches.append(Match(finding, tuple(hits)))
    return matches
