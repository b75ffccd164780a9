"""``swa-kit bugs [--replay ID|all] [--json]``: the known SGLang / vLLM / aiter sliding-window bugs, each replayed
through its engine's audit."""

from __future__ import annotations

import argparse

from swa_kit.commands._output import print_json
from swa_kit.exit_codes import ExitCode
from swa_kit.tables import plural, print_table

NAME = "bugs"
HELP = "known SGLang/vLLM/aiter sliding-window bugs by number; --replay runs the audit on them"
STATUSES = (f"exit status: {ExitCode.OK:d} = the list, or every replay as the corpus expects (its finding raised, or "
            f"a gap the audit still cannot raise); {ExitCode.DISAGREES:d} = a replay that disagrees; "
            f"{ExitCode.BAD_INPUT:d} = an unknown id or a malformed entry, named by file and field")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = f"{HELP}. {STATUSES}"
    parser.add_argument("--replay", metavar="ID", help="build the entry's launch, run its engine's audit on it "
                                                       "(swa-kit audit, or its --engine vllm) and say whether its "
                                                       "finding class is raised; 'all' replays every entry")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _replay_row(result) -> dict:
    entry = result.entry
    return {"id": entry.id, "engine": entry.engine, "finding_class": entry.finding_class, "verdict": result.verdict,
            "as_expected": result.ok, "detail": result.detail}


def run(args: argparse.Namespace) -> int:
    from swa_kit.measure import bugs  # builds launches and reads transformers: import when asked

    corpus = bugs.load_corpus()
    if args.replay is None:
        rows = bugs.entry_rows(corpus)
        if args.json:
            print_json(rows)
            return ExitCode.OK
        print_table(rows, ["id", "engine", "title", "fixed_by", "finding_class", "replays"])
        gaps = sum(1 for e in corpus if e.gap)
        print(f"\n{plural(len(corpus), 'thread')}: {len(corpus) - gaps} replay with their finding raised, {gaps} "
              "the audit cannot raise yet (swa-kit bugs --replay all says why)")
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
    return ExitCode.OK if all(r.ok for r in results) else ExitCode.DISAGREES
