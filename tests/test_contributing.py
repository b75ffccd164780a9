"""CONTRIBUTING.md's two generated tables, the layers and where new work goes, against the package docstrings.

The layers table has one row per top-level module (its docstring's first line) and per package (its
``__init__`` docstring's first line), lowest layer first, in the order ``tests/test_layers.py`` enforces. The
where-does-X-go table has one row per bullet of a package docstring's ``Where new work goes:`` section, written
``* what you add: where it goes``. A docstring changed without regenerating fails here with the command.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from generated_blocks import check_block
from test_layers import LAYERS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "swa_kit"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
COMMAND = "python -m pytest tests/test_contributing.py"
SECTION = "Where new work goes:"
NOT_A_LAYER = {"__main__", "data"}  # the entry point, and the link to data/ (the kit's shipped data, no code)


def docstring(path: Path) -> str:
    text = ast.get_docstring(ast.parse(path.read_text()))
    assert text, f"{path.relative_to(ROOT)} has no docstring: the generated tables in CONTRIBUTING.md read it"
    return text


def markdown(rst: str) -> str:
    """A docstring's reStructuredText inline markup as Markdown, on one line (a table cell)."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", rst)
    return " ".join(text.replace("``", "`").replace("|", "\\|").split())


def layer_of(path: Path) -> str:
    """The layer of a top-level module or a package: its first component below swa_kit (the rules: none)."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0] if parts[0] in LAYERS else ""


def entries() -> list[tuple[str, Path]]:
    """(layer, file) for every top-level module and every package of the kit, lowest layer first."""
    modules = [p for p in PACKAGE.glob("*.py") if p.stem not in NOT_A_LAYER | {"__init__"}]
    packages = [p for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE
                and p.relative_to(PACKAGE).parts[0] not in NOT_A_LAYER]
    found = [(layer_of(p if p.name != "__init__.py" else p.parent), p) for p in modules + packages]
    unknown = [str(p.relative_to(ROOT)) for layer, p in found if p.name == "__init__.py" and not layer]
    assert not unknown, f"packages in no layer of tests/test_layers.py: {unknown}"
    return sorted(found, key=lambda e: (LAYERS.index(e[0]), e[1].parent != PACKAGE / e[0], e[1].as_posix()))


def shown(path: Path) -> str:
    return (path.parent.relative_to(ROOT).as_posix() + "/") if path.name == "__init__.py" \
        else path.relative_to(ROOT).as_posix()


def layers_table() -> str:
    rows = ["| layer | module or package | what it holds |", "| --- | --- | --- |"]
    previous = None
    for layer, path in entries():
        name = (layer or "rules") if layer != previous else ""
        rows.append(f"| {name} | `{shown(path)}` | {markdown(docstring(path).splitlines()[0])} |")
        previous = layer
    return "\n".join(rows)


def where_items(text: str) -> list[tuple[str, str]]:
    """The ``* what: where`` bullets of a docstring's ``Where new work goes:`` section."""
    lines = text.splitlines()
    if SECTION not in lines:
        return []
    items: list[str] = []
    for line in lines[lines.index(SECTION) + 1:]:
        if line.startswith("* "):
            items.append(line[2:])
        elif line.startswith("  ") and items:
            items[-1] += " " + line.strip()
        elif line.strip() or items:
            break
    pairs = [item.split(": ", 1) for item in items]
    bad = [item for item, pair in zip(items, pairs) if len(pair) != 2]
    assert items and not bad, f"{SECTION} needs bullets written '* what you add: where it goes', not {bad or items}"
    return [(markdown(what), markdown(where)) for what, where in pairs]


def where_table() -> str:
    packages = [PACKAGE / "__init__.py"] + [p for _, p in entries() if p.name == "__init__.py"]
    rows = ["| you are adding ... | where it goes |", "| --- | --- |"]
    rows += [f"| {what} | {where} |" for p in packages for what, where in where_items(docstring(p))]
    return "\n".join(rows)


def test_the_layers_table_is_generated_from_the_docstrings():
    check_block(CONTRIBUTING, "layers", layers_table(), COMMAND)


def test_the_where_table_is_generated_from_the_docstrings():
    check_block(CONTRIBUTING, "where-new-work-goes", where_table(), COMMAND)


@pytest.mark.parametrize("what", ["a new SGLang attention backend", "a new architecture (model)", "a new exercise",
                                  "a new bench path", "a `swa-kit` subcommand", "a figure", "a lesson"])
def test_the_where_table_answers(what):
    assert f"| {what} | " in where_table()


def test_every_layer_of_the_import_test_has_a_row():
    table = layers_table()
    assert all(f"| {layer or 'rules'} | " in table for layer in LAYERS)


def test_the_section_parser():
    doc = ("Title.\n\nWhere new work goes:\n\n* a thing: ``a/b.py``, see\n  :mod:`~swa_kit.window`\n* more: here\n\n"
           "Next.")
    assert where_items(doc) == [("a thing", "`a/b.py`, see `swa_kit.window`"), ("more", "here")]
    assert where_items("Title only.") == []
    with pytest.raises(AssertionError, match="what you add: where it goes"):
        where_items("T.\n\nWhere new work goes:\n\n* no colon here\n")
    with pytest.raises(AssertionError, match="what you add: where it goes"):
        where_items("T.\n\nWhere new work goes:\n\nprose, not bullets\n")


def test_a_stale_table_fails_with_the_command(tmp_path, monkeypatch):
    monkeypatch.delenv("SWA_KIT_WRITE_DOCS", raising=False)
    stale = tmp_path / "CONTRIBUTING.md"
    stale.write_text("<!-- where-new-work-goes:begin -->\n| old | table |\n<!-- where-new-work-goes:end -->\n")
    with pytest.raises(AssertionError, match=re.escape(f"SWA_KIT_WRITE_DOCS=1 {COMMAND}")):
        check_block(stale, "where-new-work-goes", where_table(), COMMAND)
