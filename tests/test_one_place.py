"""One place per rule: the speculative algorithms, the SGLang version, the exit codes and the table formatter.

Each check reads the library's source with ``ast`` (never a text grep, so docstrings, comments and prose are never
mistaken for code), and each is first shown to catch a planted second copy.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import swa_kit
from swa_kit.engine.spec_algorithms import ALIASES, SpeculativeAlgorithm
from swa_kit.sglang_versions import BEFORE_38756, SGLANG_VERSION

PACKAGE = Path(swa_kit.__file__).parent
ALGORITHM_NAMES = {a.name for a in SpeculativeAlgorithm if a.is_some()} | set(ALIASES)
#: The layers that keep the rules; lessons, viz and widgets may name the algorithms a lesson shows.
LIBRARY_EXCLUDES = ("lessons", "viz", "widgets")


def _sources(excludes: tuple[str, ...] = ()) -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] not in excludes:
            yield str(rel), ast.parse(path.read_text(), str(path))


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _strings(tree: ast.AST) -> Iterator[ast.Constant]:
    """Every string constant of ``tree`` but its docstrings (f-strings' literal parts included)."""
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node


# -- speculative algorithms ----------------------------------------------------------------------------------


def _is_algorithm(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.upper() in ALGORITHM_NAMES


def algorithm_lists(tree: ast.AST) -> list[int]:
    """Lines holding a second list of algorithms: a tuple / list / set / dict of two or more algorithm names, or a
    comparison with an algorithm's name (``spec == "frozen_kv_mtp"``, ``name in ("EAGLE", ...)``)."""
    lines = []
    for node in ast.walk(tree):
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else \
            node.keys if isinstance(node, ast.Dict) else []
        if sum(map(_is_algorithm, items)) >= 2:
            lines.append(node.lineno)
        if isinstance(node, ast.Compare) and any(map(_is_algorithm, [node.left, *node.comparators])):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("planted", ['FAMILY = ("EAGLE", "EAGLE3", "NEXTN")', 'if spec == "frozen_kv_mtp": pass',
                                     'ways = {"eagle": 1, "ngram": 2}', 'ok = name in ["dflash", "Standalone"]'])
def test_a_planted_list_of_algorithms_is_caught(planted):
    assert algorithm_lists(ast.parse(planted)) == [1]
    assert algorithm_lists(ast.parse('name = "EAGLE"\nkinds = ("sliding", "full")')) == []


def test_the_library_keeps_one_list_of_speculative_algorithms():
    found = [f"swa_kit/{rel}:{line}" for rel, tree in _sources(LIBRARY_EXCLUDES)
             if rel != "engine/spec_algorithms.py" for line in algorithm_lists(tree)]
    assert not found, ("speculative algorithms listed outside swa_kit/engine/spec_algorithms.py (read its traits "
                       "instead): " + ", ".join(found))


# -- the SGLang version --------------------------------------------------------------------------------------

_CITATION = re.compile(r"sglang (?P<version>\d+\.\d+\.\d+) \S*/")  # "sglang 0.5.23 arg_groups/...": a source


def version_literals(tree: ast.AST) -> list[int]:
    """Lines where a string holds a version the kit compares, offers or prints, rather than citing a source."""
    lines = []
    for node in _strings(tree):
        cited = _CITATION.sub("", node.value)
        if SGLANG_VERSION in cited or BEFORE_38756 in cited:
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("planted", [f'DEFAULT = "{SGLANG_VERSION}"', f'HINT = "pip install sglang=={SGLANG_VERSION}"',
                                     f'how = f"bundled {SGLANG_VERSION} table {{x}}"', f'v = ("{BEFORE_38756}",)'])
def test_a_planted_version_is_caught(planted):
    assert version_literals(ast.parse(planted)) == [1]
    cited = f'"""SGLang {SGLANG_VERSION} docs."""\nSOURCE = "sglang {SGLANG_VERSION} arg_groups/speculative_hook.py"'
    assert version_literals(ast.parse(cited)) == []


def test_the_sglang_version_is_written_once():
    found = [f"swa_kit/{rel}:{line}" for rel, tree in _sources() if rel != "sglang_versions.py"
             for line in version_literals(tree)]
    assert not found, "SGLang versions written outside swa_kit/sglang_versions.py: " + ", ".join(found)


# -- exit codes and the table formatter -----------------------------------------------------------------------


def exit_code_names(tree: ast.AST) -> list[int]:
    """Lines that name an exit status outside the table (``EXIT_OK = 0``, ``EXIT_NO_GPU = ...``)."""
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
            and node.id.upper().startswith("EXIT")]


def _rule_piece(node: ast.AST) -> bool:
    """A string (or a list of strings) of dashes, pipes, colons and spaces holding a dash: a piece of a table rule."""
    if isinstance(node, ast.List):
        return any(map(_rule_piece, node.elts))
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and "-" in node.value \
        and set(node.value) <= set("-|: ")


def table_rules(tree: ast.AST) -> list[int]:
    """Lines that draw a table's rule: ``"-" * width`` or a Markdown ``---`` separator."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and (_rule_piece(node.left) or
                                                                              _rule_piece(node.right)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "---" in node.value:
            lines.append(node.lineno)
    return sorted(set(lines))


def test_planted_exit_codes_and_table_rules_are_caught():
    assert exit_code_names(ast.parse("EXIT_OK, EXIT_FINDINGS = 0, 1")) == [1, 1]
    assert exit_code_names(ast.parse("code = ExitCode.OK")) == []
    assert table_rules(ast.parse('rule = "  ".join("-" * w for w in widths)')) == [1]
    assert table_rules(ast.parse('sep = "|" + "---|" * n')) == [1]
    assert table_rules(ast.parse('x = 2 * width - 1\ny = n * 1e-6\nz = "a-b" * 2')) == []


def test_one_exit_code_table_and_one_table_formatter():
    codes = [f"swa_kit/{rel}:{line}" for rel, tree in _sources() if rel != "exit_codes.py"
             for line in exit_code_names(tree)]
    assert not codes, "exit statuses named outside swa_kit/exit_codes.py's ExitCode: " + ", ".join(codes)
    rules = [f"swa_kit/{rel}:{line}" for rel, tree in _sources() if rel != "tables.py" for line in table_rules(tree)]
    assert not rules, "tables drawn outside swa_kit/tables.py's format_table: " + ", ".join(rules)
