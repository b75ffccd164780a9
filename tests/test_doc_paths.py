"""Every repository path and ``swa_kit.`` name the guides name exists, so a move cannot leave a guide pointing at
nothing.

Read: README.md, CONTRIBUTING.md, CHANGELOG.md, docs/*.md and the notebooks' py:percent twins. Checked:

* a path whose first component is a top-level entry of this repository (``swa_kit/engine/routing.py``,
  ``data/bench/``, ``tests/test_pools*.py``): it exists, or for a pattern (``*``, ``{a,b}``, or a placeholder:
  ``<name>``, ``NN_topic``, ``NAME``, ``TOPIC``) something matches it. Paths git ignores (outputs such as
  ``tests/artifacts/``) are not the repository's; SGLang's and aiter's source paths (``python/sglang/...``,
  ``aiter/ops/...``) and URLs start with no top-level entry of this repository, so they are not read as its paths;
* a relative Markdown link or image: its file exists, and a ``#anchor`` into a .md file is one of its headings;
* a dotted ``swa_kit.x.y`` name: the longest module prefix is a module of the kit, the next name is defined in it,
  and, where that name is a class, the name after it is defined in the class.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md"),
                 *(ROOT / "notebooks").glob("*.py")])

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w./<>-])\.?[\w-][\w.-]*(?:/[\w.*{},<>-]*)+")  # a/b.py, .ci/run, data/, a/{b,c}.py, a/<name>
DOTTED = re.compile(r"(?<![\w/.])swa_kit(?:\.[A-Za-z_]\w*)+")
PLACEHOLDER = re.compile(r"<\w+>|\bNN_\w+|\b(?:NAME|TOPIC)\b")  # a path's placeholders: <name>, NN_topic, NAME


@functools.cache
def top_level() -> frozenset[str]:
    """The repository's top-level entries: the first component of every file git tracks."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return frozenset(line.split("/", 1)[0] for line in tracked.splitlines())


def ignored(paths: list[str]) -> set[str]:
    """The paths git ignores (outputs the kit writes, such as tests/artifacts/)."""
    if not paths:
        return set()
    found = subprocess.run(["git", "check-ignore", "--stdin"], cwd=ROOT, input="\n".join(paths),
                           capture_output=True, text=True)
    return set(found.stdout.splitlines())


def repository_paths(text: str) -> set[str]:
    """Tokens of ``text`` that name a path in this repository: their first component is a top-level entry."""
    found = set()
    for token in PATH.findall(text):
        token = token if token.endswith("...") else token.rstrip(".,")
        if token.split("/", 1)[0] in top_level():
            found.add(token)
    return found


def _expand_braces(path: str) -> list[str]:
    """``allocator/{base,token}.py`` -> both paths."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return list(itertools.chain.from_iterable(
        _expand_braces(path[:match.start()] + choice + path[match.end():]) for choice in match.group(1).split(",")))


def path_exists(path: str) -> bool:
    """``path`` (relative to the root) exists; a pattern or a placeholder must match at least one entry."""
    for each in _expand_braces(path):
        pattern = PLACEHOLDER.sub("*", each.replace("...", "*")).rstrip("/")
        wants_dir = each.endswith("/")
        if "*" in pattern or "?" in pattern:
            matches = [m for m in ROOT.glob(pattern) if m.is_dir() or not wants_dir]
        else:
            matches = [m for m in [ROOT / pattern] if m.is_dir() or (m.exists() and not wants_dir)]
        if not matches:
            return False
    return True


def _defined_names(body: list[ast.stmt]) -> set[str]:
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            names |= _defined_names(node.body + getattr(node, "orelse", []))
    return names


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def dotted_name_exists(name: str) -> bool:
    """``swa_kit.a.b.C.d``: the longest prefix that is a module, the next name in it, and a class's member."""
    parts = name.split(".")
    cut = next((n for n in range(len(parts), 0, -1) if _module_file(parts[:n])), 0)
    if not cut:
        return False
    rest = parts[cut:]
    if not rest:
        return True
    tree = ast.parse(_module_file(parts[:cut]).read_text())
    if rest[0] not in _defined_names(tree.body):
        return False
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    return len(rest) == 1 or rest[0] not in classes or rest[1] in _defined_names(classes[rest[0]].body)


def anchors(markdown: str) -> set[str]:
    """A Markdown file's heading anchors as GitHub makes them, and explicit ``<a id>`` anchors."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.M)
    slugs = {re.sub(r"[^\w -]", "", h.strip().lower()).replace(" ", "-") for h in headings}
    return slugs | set(re.findall(r'<a id="([^"]+)"', markdown))


def broken_links(text: str, folder: Path) -> list[str]:
    """Relative links and images in ``text`` (a file in ``folder``) whose file or #anchor is missing."""
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z+.-]*:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        file = (folder / path).resolve() if path else None
        if file is not None and not file.exists():
            broken.append(target)
        elif anchor and (file is None or file.suffix == ".md"):
            if anchor not in anchors(file.read_text() if file else text):
                broken.append(target)
    return broken


def missing_names(text: str, folder: Path = ROOT) -> list[str]:
    """Everything ``text`` names that does not exist: repository paths, links, ``swa_kit.`` names."""
    paths = sorted(repository_paths(text))
    skip = ignored(paths)
    missing = [p for p in paths if p not in skip and not path_exists(p)]
    missing += broken_links(text, folder)
    missing += sorted({n for n in DOTTED.findall(text) if not dotted_name_exists(n)})
    return list(dict.fromkeys(missing))


@pytest.mark.parametrize("guide", GUIDES, ids=[str(p.relative_to(ROOT)) for p in GUIDES])
def test_every_named_path_exists(guide):
    missing = missing_names(guide.read_text(), guide.parent)
    assert not missing, f"{guide.relative_to(ROOT)} names what does not exist: {missing}"


def test_the_guides_are_all_read():
    names = {p.relative_to(ROOT).as_posix() for p in GUIDES}
    assert {"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs/cli.md"} <= names
    assert len([n for n in names if n.startswith("notebooks/")]) >= 7


def test_the_checker_catches_made_up_names():
    text = ("See `swa_kit/pools.py`, [the notes](docs/no-such-notes.md), `tests/test_nothing_like_this*.py`, "
            "`data/bench/no-such-run.json`, `swa_kit.spec.run`, `swa_kit.window.no_such_function`, "
            "`swa_kit.window.Window.no_such_method`, `swa_kit/commands/{window,no_such_command}.py`, "
            "a folder that is a file: `README.md/`, [a heading](CONTRIBUTING.md#no-such-heading).")
    assert sorted(missing_names(text)) == sorted([
        "README.md/", "data/bench/no-such-run.json", "swa_kit/commands/{window,no_such_command}.py",
        "swa_kit/pools.py", "tests/test_nothing_like_this*.py", "docs/no-such-notes.md",
        "CONTRIBUTING.md#no-such-heading", "swa_kit.spec.run", "swa_kit.window.Window.no_such_method",
        "swa_kit.window.no_such_function"])


def test_the_checker_passes_real_names_and_leaves_other_projects_alone():
    text = ("`swa_kit/engine/routing.py` and `swa_kit/engine/pools/allocator/{base,token,paged,swa}.py`, "
            "`tests/test_pools*.py`, `swa_kit/viz/TOPIC.py`, `data/models/`, `python scripts/readme_figures.py`, "
            "`tests/test_cli.py::test_help`, ![img](docs/img/conventions.png), [kit](README.md#swa_kit), "
            "`swa_kit.window.Window.attends`, `swa_kit.measure.bench`, `swa_kit.engine.routing.plan(...)`. "
            "Not ours: `python/sglang/srt/layers/attention/aiter_backend.py`, `aiter/ops/triton/unified_attention.py`, "
            "https://github.com/sgl-project/sglang/pull/38756, `tests/artifacts/` (git ignores it), "
            "`tour-out/index.html`.")
    assert missing_names(text) == []
    assert repository_paths(text) >= {"swa_kit/engine/routing.py", "scripts/readme_figures.py", "tests/test_cli.py"}
    assert not any(p.startswith(("python/", "aiter/", "tour-out/")) for p in repository_paths(text))
