"""The tree shows the layers: each package imports only the layers below it, and no module imports in a cycle.

Layers, lowest first (CONTRIBUTING.md, "Where things go"): the rules and small helpers at the top of
``swa_kit/``, then ``models``, ``attention``, ``engine``, ``launch``, ``measure``, ``lessons``, ``viz``,
``widgets``, ``commands`` and the CLI. Every import is read from the source (function-level ones too), so an
import that runs up a layer fails here even when it is deferred to call time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import swa_kit

PACKAGE = Path(swa_kit.__file__).parent
LAYERS = ("", "models", "attention", "engine", "launch", "measure", "lessons", "viz", "widgets", "commands", "cli")
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    """The layer of ``swa_kit.x.y``: its first package below ``swa_kit``; a top-level module is the rules' layer."""
    parts = module.split(".")
    if len(parts) < 2:
        return 0
    head = "cli" if parts[1] == "__main__" else parts[1]
    if head in LAYERS:
        return LAYERS.index(head)
    is_package = (PACKAGE / head).is_dir()
    assert not is_package, f"package swa_kit.{head} is in no layer: add it to LAYERS and to CONTRIBUTING.md"
    return 0


def _imports(path: Path, module: str) -> set[str]:
    """Every swa_kit module ``path`` imports, resolved to module names (``from pkg import mod`` gives ``pkg.mod``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("swa_kit"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("swa_kit"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if _exists(candidate) else base)
    return found


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p, _module_name(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_import_runs_down_the_layers():
    upward = [f"{mod} (layer {LAYERS[_layer(mod)] or 'rules'}) imports {dep} (layer {LAYERS[_layer(dep)]})"
              for mod, deps in _graph().items() for dep in sorted(deps) if _layer(dep) > _layer(mod)]
    assert not upward, "imports that run up a layer:\n" + "\n".join(upward)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path, or None (depth-first search with colours)."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if colour.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in colour and (found := visit(dep)):
                return found
        stack.pop()
        colour[node] = 2
        return None

    for node in sorted(graph):
        if node not in colour and (found := visit(node)):
            return found
    return None


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph one level down: ``swa_kit.engine.pools.x`` counts as ``swa_kit.engine.pools``' package's import."""
    def package(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:-1]) if _exists(module) and not (PACKAGE / Path(*parts[1:])).is_dir() else module

    out: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        src = package(mod)
        out.setdefault(src, set()).update(d for d in map(package, deps) if d != src
                                          and not d.startswith(src + ".") and not src.startswith(d + "."))
    return out


def test_no_module_imports_in_a_cycle():
    assert _cycle(_graph()) is None, f"import cycle: {' -> '.join(_cycle(_graph()) or [])}"


def test_no_package_imports_in_a_cycle():
    cycle = _cycle(_package_graph(_graph()))
    assert cycle is None, f"package-level import cycle: {' -> '.join(cycle or [])}"


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
])
def test_the_cycle_search_finds_a_cycle_and_only_a_cycle(graph, expected):
    assert _cycle(graph) == expected


def test_an_upward_import_is_seen(tmp_path):
    """The check reads function-level imports too: a deferred import of a higher layer is found."""
    source = tmp_path / "window.py"
    source.write_text("def f():\n    from swa_kit.lessons import tour\n")
    deps = _imports(source, "swa_kit.window")
    assert "swa_kit.lessons.tour" in deps and _layer("swa_kit.lessons.tour") > _layer("swa_kit.window")


def test_no_module_is_over_the_line_ceiling():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"
