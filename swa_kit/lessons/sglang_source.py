"""SGLang's own lines beside the lessons: read from the installed package, never copied into the kit.

:func:`sglang_source` finds a named SGLang function (or one call site inside one) in the INSTALLED sglang
package and returns its text with file and line. It parses the file with :mod:`ast` instead of importing it,
because the backends import GPU-only modules (aiter, CUDA kernels) at module level. Without SGLang it returns
where to look in SGLang :data:`~swa_kit.sglang_versions.SGLANG_VERSION` (the file, function and line recorded in
:data:`SPOTS`, which a test checks against the real source) and says why nothing is shown.

:func:`unified_site_fix` states, in the kit's own words, what PR #38756 changed around the unified call sites
and the one-line change that would make them attend the window.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from swa_kit.sglang_versions import SGLANG_VERSION
from swa_kit.window import to_keys


@dataclass(frozen=True)
class Spot:
    """Where one piece of SGLang lives in :data:`SGLANG_VERSION`, and what the lesson reads in it."""

    file: str  # relative to the sglang package
    qualname: str  # Class.method or function
    line: int  # the first line shown, in SGLANG_VERSION
    why: str
    # For a call site inside a function: the ``if`` block that assigns this target the unified argument.
    call_site_target: str | None = None


_AITER = "srt/layers/attention/aiter_backend.py"
_TRITON = "srt/layers/attention/triton_backend.py"

#: The SGLang lines the lessons show, by name.
SPOTS: dict[str, Spot] = {
    "resolve_swa_kv_pool": Spot(
        _AITER, "AiterAttnBackend._resolve_swa_kv_pool", 3655,
        "PR #38756's resolver: which SWA pool a worker translates its slot ids against"),
    "reject_paged_decode_sliding_window": Spot(
        _AITER, "AiterAttnBackend._reject_paged_decode_sliding_window", 3675,
        "PR #38756's guard: a sliding layer routed to paged decode raises instead of attending everything"),
    "unified_decode_call_site": Spot(
        _AITER, "AiterAttnBackend.forward_decode", 4789,
        "one of the four unified call sites: the window argument (sws - 1, 0) and the translated SWA page table",
        call_site_target="window_size"),
    "triton_window_buffer": Spot(
        _TRITON, "update_sliding_window_buffer", 2845,
        "the Triton backend's window of KV indices: min(seq_len, sliding_window_size) keys, one short of W"),
}


@dataclass(frozen=True)
class SourceView:
    """One spot's source as installed, or where to open it and why it is not shown."""

    name: str
    spot: Spot
    text: str | None  # None: not shown (``reason`` says why)
    file: str  # the installed file, or the path inside SGLang's package
    line: int  # the first line shown (installed), or the recorded line in SGLANG_VERSION
    version: str | None  # the installed SGLang's version, None without SGLang
    reason: str | None = None

    def __str__(self) -> str:
        if self.text is None:
            return (f"{self.spot.qualname}: {self.spot.why}.\nNot shown: {self.reason}\n"
                    f"Open sglang/{self.spot.file} of SGLang {SGLANG_VERSION} at line {self.spot.line} "
                    f"({self.spot.qualname}).")
        head = f"# {self.file}:{self.line}  (SGLang {self.version}, {self.spot.qualname}: {self.spot.why})"
        return f"{head}\n{self.text}"


def _sglang_dir() -> tuple[Path, str] | None:
    """The installed sglang package's folder and version, found without importing it."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return Path(next(iter(spec.submodule_search_locations))), version


def _find_def(tree: ast.Module, qualname: str) -> ast.FunctionDef:
    body: list[ast.stmt] = tree.body
    *owners, name = qualname.split(".")
    for owner in owners:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == owner), None)
        if cls is None:
            raise LookupError(f"class {owner} not found")
        body = cls.body
    found = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if found is None:
        raise LookupError(f"function {qualname} not found")
    return found


def _is_unified_window(node: ast.AST, target: str) -> bool:
    """``target = (<something> - 1, 0)``: the unified sites' window argument."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == target and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 2):
        return False
    left, right = node.value.elts
    return (isinstance(left, ast.BinOp) and isinstance(left.op, ast.Sub) and isinstance(left.right, ast.Constant)
            and left.right.value == 1 and isinstance(right, ast.Constant) and right.value == 0)


def _call_site(function: ast.FunctionDef, target: str) -> ast.If:
    """The first ``if`` block in ``function`` that assigns ``target`` the unified argument directly."""
    for node in ast.walk(function):
        if isinstance(node, ast.If) and any(_is_unified_window(s, target) for s in node.body):
            return node
    raise LookupError(f"no `{target} = (... - 1, 0)` block in {function.name}")


def _segment(lines: list[str], node: ast.stmt) -> str:
    chunk = lines[node.lineno - 1: node.end_lineno]
    indent = min(len(s) - len(s.lstrip()) for s in chunk if s.strip())
    return "\n".join(s[indent:] for s in chunk)


def sglang_source(name: str) -> SourceView:
    """The spot ``name`` (a key of :data:`SPOTS`) as the installed SGLang has it, or where to look without it."""
    if name not in SPOTS:
        raise KeyError(f"unknown SGLang spot {name!r}; known: {', '.join(SPOTS)}")
    spot = SPOTS[name]
    found = _sglang_dir()
    if found is None:
        return SourceView(name, spot, None, f"sglang/{spot.file}", spot.line, None,
                          "SGLang is not installed in this Python, and the kit does not copy its code "
                          "(`pip install sglang` in another venv shows it here).")
    root, version = found
    path = root / spot.file
    if not path.is_file():
        return SourceView(name, spot, None, f"sglang/{spot.file}", spot.line, version,
                          f"SGLang {version} is installed but has no {spot.file}.")
    source = path.read_text(encoding="utf-8")
    try:
        function = _find_def(ast.parse(source), spot.qualname)
        node: ast.stmt = function if spot.call_site_target is None else _call_site(function, spot.call_site_target)
    except LookupError as missing:
        return SourceView(name, spot, None, str(path), spot.line, version,
                          f"SGLang {version}'s {spot.file} has changed: {missing}.")
    return SourceView(name, spot, _segment(source.splitlines(), node), str(path), node.lineno, version)


@dataclass(frozen=True)
class SiteFix:
    """The unified call sites' window argument: what SGLang passes and the one-line change to attend W."""

    keys: int  # W, the window the layer is meant to attend
    sws: int  # SGLang's sliding_window_size for it (W - 1)
    passed: tuple[int, int]
    passed_keys: int
    fixed: tuple[int, int]
    fixed_keys: int

    def __str__(self) -> str:
        return "\n".join((
            f"A layer meant to attend W = {self.keys} keys has SGLang's sliding_window_size sws = {self.sws}.",
            "PR #38756 left the unified sites' window argument as it was: it changed which pool their SWA "
            "page table is translated against (the resolver) and refused paged decode (the guard).",
            f"  today:    window_size = (sws - 1, 0) = {self.passed}  -> unified_attention attends "
            f"{self.passed_keys} keys",
            f"  the fix:  window_size = (sws, 0)     = {self.fixed}  -> attends {self.fixed_keys} keys",
            "The same one-line change at each of the four unified sites (extend, decode, verify, draft extend).",
        ))


def unified_site_fix(keys: int = 1024) -> SiteFix:
    """What the unified sites pass for a ``keys``-key window, and the fix, each read back through the kit's
    converters (aiter's unified kernel attends ``left + 1`` keys)."""
    if to_keys("hf", keys) is None or keys < 2:  # not a window (0, negative, not an int) raises, naming the value
        raise ValueError(f"keys={keys}: at one key SGLang's (sws - 1, 0) is (-1, 0), which the unified kernel reads "
                         "as no window at all; give a window of 2 keys or more")
    sws = keys - 1
    passed, fixed = (sws - 1, 0), (sws, 0)
    passed_keys, fixed_keys = to_keys("aiter_unified", passed), to_keys("aiter_unified", fixed)
    assert passed_keys is not None and fixed_keys is not None  # keys >= 2: neither argument is "off"
    return SiteFix(keys, sws, passed, passed_keys, fixed, fixed_keys)
