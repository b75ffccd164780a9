"""No exercise's answer can be read off the notebook above it (issue 35).

Each exercise's answer comes from its reference solution in ``swa_kit.lessons.workshop`` (the function its check
compares against), never typed in here. The test executes the notebook and searches everything above the
exercise's own cell (markdown prose, code, and every output) for that answer in the forms a notebook would show
it: the number as printed, a pair or a list as Python writes it, a choice word beside the case it answers. The
search is held to a planted leak: each answer, printed one cell above its exercise, must be found.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import nbformat
import pytest

from swa_kit.lessons.tour import find_notebooks_dir, run_notebook
from swa_kit.lessons.workshop import debugging, dispatch, drafts, engines, kernels, pools, story, windows

#: One piece of text a learner reads (a sentence of prose, a line of code or output); True if it shows an answer.
Tell = Callable[[str], bool]


def number(value: float, decimals: int = 1, after: str = "") -> Tell:
    """``value`` printed to ``decimals`` places (and, when ``decimals`` > 0, rounded to a whole number and followed
    by ``after``, e.g. ``%``), standing alone: not part of a longer number."""
    forms = [re.escape(f"{value:.{decimals}f}")]
    if decimals and after:
        forms.append(re.escape(f"{value:.0f}") + r"\s*" + after)
    pattern = re.compile(r"(?<![\w.])(?:" + "|".join(forms) + r")(?![\d])")
    return lambda text: bool(pattern.search(text))


def literal(value: Any) -> Tell:
    """``value`` as Python prints it (a pair, a list), or its items in order without the brackets."""
    forms = {repr(value), repr(value)[1:-1]} if isinstance(value, (list, tuple)) else {repr(value)}
    return lambda text: any(form in text for form in forms)


def labelled(label: str, value: Any) -> Tell:
    """``value`` right after a word starting with ``label`` (``full_live': 16``, ``position 15``, ``refuses 52``)."""
    pattern = re.compile(rf"{label}\w*['\"]?\W{{1,4}}{re.escape(str(value))}(?![\d.])", re.I)
    return lambda text: bool(pattern.search(text))


def keys(n: int) -> Tell:
    """``n`` as a count of attended keys: ``1023 keys``, ``1023 of 1024 keys``, ``attends 1023``, ``effective_keys
    = 1023``."""
    pattern = re.compile(rf"(?<![\w.]){n}\s+(?:of\s+[\d,]+\s+)?keys|attend\w*\W+{n}(?!\d)|keys\w*\W{{1,4}}{n}(?!\d)",
                         re.I)
    return lambda text: bool(pattern.search(text))


def near(subject: str, answer: str) -> Tell:
    """``answer`` in the same sentence or line as ``subject`` (whole words; ``answer`` not counted inside
    ``subject``)."""
    word = re.compile(rf"(?<![\w-]){answer}(?![\w-])", re.I)
    return lambda text: subject in text and bool(word.search(text.replace(subject, " ")))


def all_of(names: list[str], none_of: list[str]) -> Tell:
    """Every one of ``names`` and none of ``none_of`` in one line: the answer list, or a list of exactly it."""
    def found(pattern: str, text: str) -> bool:
        return re.search(rf"(?<![\w.]){re.escape(pattern)}(?![\w.])", text) is not None
    return lambda text: all(found(n, text) for n in names) and not any(found(n, text) for n in none_of)


@dataclass(frozen=True)
class Exercise:
    number: str
    notebook: str
    asks: str  #: the check call in the exercise's own cell
    answer: Callable[[], Any]  #: the reference solution
    tells: Callable[[Any], list[Tell]]  #: the ways that answer would show in a notebook
    label: str = "answer"  #: what a cell printing the answer calls it


def _pct(fraction: float) -> float:
    return 100 * fraction


EXERCISES = [
    Exercise("0.1", "00_the_story", "check_default_saving(my_percent)",
             lambda: _pct(story.story_memory("gemma4-31b")["default_saved_fraction"]),
             lambda pct: [number(pct, 1, "%")]),
    Exercise("0.2", "00_the_story", "check_triage(my_triage)",
             lambda: {case: story.triage(route) for case, route in story.TRIAGE_CASES.items()},
             lambda costs: [near(case, cost) for case, cost in costs.items()]),
    Exercise("1.1", "01_window_conventions_and_masks", "check_window_everywhere(my_values)",
             windows.window_everywhere,
             lambda values: [literal(v) for v in values.values() if isinstance(v, tuple)]
             + [near(name, str(v)) for name, v in values.items() if isinstance(v, int)]),
    Exercise("1.2", "01_window_conventions_and_masks", "check_unconverted(my_counts",
             lambda: windows.keys_if_passed_unconverted(1024),
             lambda counts: [number(n, 0) for n in set(counts.values()) if isinstance(n, int) and n > 1024]),
    Exercise("1.3", "01_window_conventions_and_masks", "check_tree_keys(my_columns",
             lambda: windows.tree_keys_seen(3), lambda columns: [literal(columns)]),
    Exercise("2.1", "02_kv_pools_full_vs_swa", "check_slots_held(my_full, my_swa)", pools.slots_held,
             lambda held: [labelled("full", held["full"]), labelled("swa", held["swa"])]),
    Exercise("2.2", "02_kv_pools_full_vs_swa", "check_hybrid_saving(my_minimum_pct",
             lambda: (_pct(pools.swa_pool_saving("gpt-oss-20b").saved_fraction),
                      __import__("swa_kit.launch.decide", fromlist=["_"]).default_sizing("gpt-oss-20b")
                      ["sglang_saved_pct"]),
             lambda pcts: [number(p, 1, "%") for p in pcts]),
    Exercise("3.1", "03_draft_target_pool_sharing", "check_resolver_breaks(my_breaks)",
             lambda: {algo: next(iter(drafts.resolvers_that_break(algo))) for algo in ("EAGLE", "FROZEN_KV_MTP")},
             lambda breaks: [near(algo.removesuffix("_MTP"), resolver) for algo, resolver in breaks.items()]),
    Exercise("3.2", "03_draft_target_pool_sharing", "check_which_worker(my_workers)",
             lambda: {symptom: answers[0] for symptom, answers in drafts.SYMPTOMS.items()},
             lambda workers: [near(symptom, worker) for symptom, worker in workers.items()]),
    Exercise("4.1", "04_aiter_dispatch_and_guards", "check_guard_way_out(my_refused_layers",
             dispatch.guard_and_way_out,
             lambda truth: [labelled("refus", truth["refused_layers"]), keys(truth["keys_after_way_out"])]),
    Exercise("4.2", "04_aiter_dispatch_and_guards", "check_one_key_short_sites(my_short_sites)",
             lambda: dispatch.one_key_short_sites(5),
             lambda sites: [all_of(sites, [s for s in dispatch.routing.SITES if s not in sites]),
                            near("unified", "one key short")]),
    Exercise("4.3", "04_aiter_dispatch_and_guards", "check_one_key_short_layers(my_short_layers)",
             dispatch.one_key_short_layers, lambda layers: [literal(layers)]),
    Exercise("5.1", "05_kernels_and_performance", "check_sliding_share(my_sliding_percent)",
             lambda: _pct(kernels.what_the_window_buys()["sliding_share_of_step"]),
             lambda pct: [number(pct, 1, "%")]),
    Exercise("5.2", "05_kernels_and_performance", "check_headline_floor(my_floor_us)",
             lambda: kernels.headline_floor_us(128 * 1024, __import__("swa_kit.measure.bench", fromlist=["_"])
                                               .load_recorded()["copy_tbs"]),
             lambda us: [number(us, 1, "(us|µs)")]),
    Exercise("6.1", "06_debugging_a_launch", "check_decode_window(my_window_arg",
             debugging.decode_window_on_aiter,
             lambda truth: [literal(truth["window_arg"]), keys(truth["attended_keys"])]),
    Exercise("6.2", "06_debugging_a_launch", "check_first_changed_position(my_first_position",
             lambda: debugging.first_position_one_short_changes(16),
             lambda position: [labelled("position", position)], label="first position"),
    Exercise("7.1", "07_one_model_two_engines", "check_unified_window_args(my_sglang_arg, my_vllm_arg)",
             lambda: (engines.unified_window_args()["sglang"], engines.unified_window_args()["vllm"]),
             lambda args: [literal(a) for a in args]),
    Exercise("7.2", "07_one_model_two_engines", "check_context_token_ratio(my_ratio)",
             engines.context_token_ratio, lambda ratio: [number(ratio, 1, "x")]),
]


def units(cell: Any) -> Iterator[str]:
    """What a learner reads in ``cell``: prose sentence by sentence (table rows and list items apart), code and
    outputs line by line."""
    if cell.cell_type == "markdown":
        prose = re.sub(r"`|\*\*", "", cell.source)  # bold and code spans do not hide a number
        for block in re.split(r"\n\s*\n|\n(?=\s*[|>*-] )|\n(?=\s*\d+\. )", prose):
            yield from re.split(r"(?<=[.!?:])\s+(?=[A-Z`*(])", " ".join(block.split()))
        return
    yield from cell.source.splitlines()
    for output in cell.get("outputs", []):
        text = output.get("text") or output.get("data", {}).get("text/plain", "")
        yield from (text if isinstance(text, str) else "".join(text)).splitlines()


def exercise_cell(nb: Any, exercise: Exercise) -> int:
    (index,) = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and exercise.asks in c.source]
    return index


def leaks(exercise: Exercise, nb: Any) -> list[str]:
    """Every sentence or line above the exercise's cell in ``nb`` that shows its answer."""
    tells = exercise.tells(exercise.answer())
    return [f"cell {i}: {text}" for i, cell in enumerate(nb.cells[:exercise_cell(nb, exercise)])
            for text in units(cell) if any(tell(text) for tell in tells)]


@cache
def executed(notebook: str) -> Any:
    nb, run = run_notebook(find_notebooks_dir() / f"{notebook}.ipynb", cell_timeout=180, threads=1)
    assert run.status == "ok", f"{notebook}: cell {run.failed_cell}: {run.error}"
    return nb


def shown(answer: Any) -> str:
    """``answer`` as a notebook cell would print it: numbers to one decimal place."""
    if isinstance(answer, float):
        return f"{answer:.1f}"
    if isinstance(answer, tuple) and all(isinstance(a, float) for a in answer):
        return ", ".join(shown(a) for a in answer)
    if isinstance(answer, dict):
        return "\n".join(f"{k}: {shown(v)}" for k, v in answer.items())
    return str(answer)


IDS = [e.number for e in EXERCISES]


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_a_planted_leak_is_found(exercise):
    """The search finds each answer printed one cell above its exercise (in a notebook that shows nothing else)."""
    nb = nbformat.v4.new_notebook()
    ask = nbformat.v4.new_code_cell(f"windows.{exercise.asks}...)")
    nb.cells = [nbformat.v4.new_markdown_cell("# A notebook"), ask]
    assert not leaks(exercise, nb)
    planted = nbformat.v4.new_code_cell("print(answer)", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text=f"{exercise.label}: {shown(exercise.answer())}")])
    nb.cells.insert(1, planted)
    assert leaks(exercise, nb), f"exercise {exercise.number}: the planted answer {shown(exercise.answer())!r} " \
                                "was not found"


@pytest.mark.notebook
@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_no_answer_above_its_exercise(exercise):
    found = leaks(exercise, executed(exercise.notebook))
    assert not found, f"exercise {exercise.number}'s answer shows above it in {exercise.notebook}:\n" + \
                      "\n".join(found)
