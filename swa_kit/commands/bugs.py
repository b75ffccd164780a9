"""``swa-kit bugs [--replay ID|all] [--json]``: the known SGLang / vLLM / aiter sliding-window bugs, each replayed
through its engine's audit."""

from __future__ import annotations

import argparse

from swa_kit.commands._output import print_json
from swa_kit.exit_codes import ExitCode
from swa_kit.sglang_versions import SGLANG_VERSION
from swa_kit.tables import plural, print_table

NAME = "bugs"
HELP = "known SGLang/vLLM/aiter sliding-window bugs by number; --replay runs the audit on them"
STATUSES = (f"exit status: {ExitCode.OK:d} = the list, or every replay as the corpus expects (its finding raised, or "
            f"a gap the audit still cannot raise); {ExitCode.DISAGREES:d} = a replay that disagrees; "
            f"{ExitCode.BAD_INPUT:d} = an unknown id or a malformed entry, named by file and field")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (f"{HELP}. The list shows each fix's releases (the last SGLang release on the package index "
                          "without it -> the first with it) and what the replay runs against: a release, or a "
                          f"before-<N> setting ({SGLANG_VERSION} with PR #N's fix undone) and the release it stands "
                          f"for. {STATUSES}")
    parser.add_argument("--replay", metavar="ID", help="build the entry's launch, run its engine's audit on it "
                                                       "(swa-kit audit, or its --engine vllm) and say whether its "
                                                       "finding class is raised; 'all' replays every entry")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _replay_row(result) -> dict:
    entry = result.entry
    return {"id": entry.id, "engine": entry.engine, "finding_class": entry.finding_class, "verdict": result.verdict,
            "as_expected": result.ok, "detail": result.detail, "replayed_at": entry.replayed_at,
            "releases": _releases_line(entry)}


def _releases_line(entry) -> str:
    releases = entry.releases
    if releases is None:
        return f"releases: {entry.releases_label}"
    if not releases.first_with:
        return f"releases: none ({releases.none})"
    from swa_kit.measure.bugs import RELEASE_RUNS  # loaded by run() already

    runs = f"; CI also runs both releases' own code for {RELEASE_RUNS[releases.runs]}" if releases.runs else ""
    return (f"releases: {releases.last_without} is the last without the fix, {releases.first_with} the first with it "
            f"(CI reads both wheels: `{releases.fix_line}` in {releases.fix_file}{runs})")


def run(args: argparse.Namespace) -> int:
    from swa_kit.measure import bugs  # builds launches and reads transformers: import when asked

    corpus = bugs.load_corpus()
    if args.replay is None:
        rows = bugs.entry_rows(corpus)
        if args.json:
            print_json(rows)
            return ExitCode.OK
        print_table(rows, ["id", "engine", "title", "fixed_by", "finding_class", "replays", "releases",
                           "replayed_at"])
        gaps = sum(1 for e in corpus if e.gap)
        paired = sum(1 for e in corpus if e.releases is not None and e.releases.first_with)
        print(f"\n{plural(len(corpus), 'thread')}: {len(corpus) - gaps} replay with their finding raised, {gaps} "
              "the audit cannot raise yet (swa-kit bugs --replay all says why)")
        print(f"releases: the last SGLang release on the package index without the fix -> the first with it "
              f"({paired} entries; CI reads both wheels' source); a before-<N> setting is SGLang {SGLANG_VERSION} "
              "with PR #N's fix undone as the kit models it, which the last release without the fix stands for")
        return ExitCode.OK
    entries = corpus if args.replay == "all" else [bugs.find_entry(corpus, args.replay)]
    results = [bugs.replay(e) for e in entries]
    rows = [_replay_row(r) for r in results]
    if args.json:
        print_json(rows)
    else:
        for result in results:
            entry = result.entry
            print(f"{entry.id}: {entry.label} ({entry.kind}, {entry.state}, {entry.fix_text}): {entry.title}")
            print(f"   expects {entry.finding_class}: {result.verdict}{'' if result.ok else '  <- NOT AS EXPECTED'}")
            print(f"   {result.detail}")
            print(f"   replayed at: {entry.replayed_at}; {_releases_line(entry)}")
    return ExitCode.OK if all(r.ok for r in results) else ExitCode.DISAGREES
