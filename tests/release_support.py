"""For the tests against older SGLang releases: their wheels from the package index, read without installing them.

``pip download sglang==V --no-deps`` fetches one wheel (a zip of SGLang's Python source, about 35 MB); nothing is
installed and no dependency is fetched. Each release is downloaded once per test run (:class:`ReleaseWheels`
keeps them in one folder for the session). A wheel that cannot be downloaded fails the test in CI (``CI=true`` or
``SWA_KIT_REQUIRE_RELEASES=1``): there a test that reads no release compares nothing. Elsewhere (no network, no
index) it skips saying why.

The decision functions at the end run an older release's own code, cut out of its source with :mod:`ast`, on
stand-in runners and pools: the release cannot be imported here (its backends import GPU kernels and its pins
differ from the kit's), but the few statements that make the decision need nothing beyond the names they read.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest

REQUIRE_RELEASES = "SWA_KIT_REQUIRE_RELEASES"


def required() -> bool:
    """In CI (``CI=true``, as .ci/run sets) or with ``SWA_KIT_REQUIRE_RELEASES=1`` a release that cannot be read
    fails the test."""
    return os.environ.get("CI", "").lower() == "true" or os.environ.get(REQUIRE_RELEASES) == "1"


class ReleaseWheels:
    """SGLang wheels by version, each downloaded once into ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._wheels: dict[str, zipfile.ZipFile] = {}

    def wheel(self, version: str) -> zipfile.ZipFile:
        if version not in self._wheels:
            self._wheels[version] = zipfile.ZipFile(self._download(version))
        return self._wheels[version]

    def _download(self, version: str) -> Path:
        into = self.folder / version
        found = sorted(into.glob("sglang-*.whl"))
        if not found:
            # Only the Python source is read, so the platform is pinned (the same wheel on any host): the x86-64
            # wheel for the running Python where a release has per-Python wheels, the pure-Python one otherwise.
            command = [sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps", "--only-binary",
                       ":all:", "--platform", "manylinux_2_34_x86_64", "--platform", "any", "--implementation", "cp",
                       "--disable-pip-version-check", "-q", "-d", str(into)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            found = sorted(into.glob("sglang-*.whl"))
            if done.returncode or not found:
                reason = (f"cannot download sglang=={version} from the package index (pip download exit "
                          f"{done.returncode}: {' '.join(done.stderr.split())[-300:]})")
                if required():
                    pytest.fail(f"{reason}; CI must read the release, or this test compares nothing", pytrace=False)
                pytest.skip(reason)
        return found[0]

    def source(self, version: str, path: str) -> str | None:
        """The text of ``path`` (``sglang/...py``) in release ``version``'s wheel, or None where it has no such file."""
        wheel = self.wheel(version)
        try:
            return wheel.read(path).decode("utf-8")
        except KeyError:
            return None


def has_line(source: str, line: str) -> bool:
    """Whether ``source`` holds ``line`` as one of its lines, indentation aside."""
    return any(text.strip() == line for text in source.splitlines())


# -- an older release's own code, run on stand-ins ----------------------------------------------------------------


class BaseSWAKVPool:
    """Stand-in for SGLang's base class of SWA pools (the kit's resolvers read pools by class name)."""


class SWAKVPool(BaseSWAKVPool):
    """Stand-in hybrid-SWA pool: what the resolvers test (its class, its SWA layer count)."""

    swa_layer_nums = 4

    def translate_loc_from_full_to_swa(self, ids: Any) -> Any:
        return ids


class MHATokenToKVPool:
    """Stand-in pool with full-size slots only (a draft's own pool, or FROZEN_KV MTP's dummy)."""


class SWATokenToKVPoolAllocator:
    """Stand-in allocator of a hybrid-SWA target: it holds the target's SWA pool."""

    def __init__(self, pool: SWAKVPool) -> None:
        self.pool = pool

    def get_kvcache(self) -> SWAKVPool:
        return self.pool


STAND_INS = {cls.__name__: cls for cls in (BaseSWAKVPool, SWAKVPool, MHATokenToKVPool, SWATokenToKVPoolAllocator)}


def runners(algorithm: Any) -> dict[str, SimpleNamespace]:
    """A hybrid-SWA target and its draft (own full-size pool), sharing the target's allocator, as SGLang wires
    them; ``algorithm`` is the draft's speculative algorithm (answers ``is_frozen_kv_mtp()`` / ``is_eagle()``)."""
    pool = SWAKVPool()
    allocator = SWATokenToKVPoolAllocator(pool)
    target = SimpleNamespace(token_to_kv_pool=pool, token_to_kv_pool_allocator=allocator, is_draft_worker=False,
                             spec_algorithm=algorithm)
    draft = SimpleNamespace(token_to_kv_pool=MHATokenToKVPool(), token_to_kv_pool_allocator=allocator,
                            is_draft_worker=True, spec_algorithm=algorithm)
    return {"target": target, "draft": draft}


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name]
    assert found, f"no class {name} in the release's source"
    return found[0]


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _assigns_to(statement: ast.stmt, targets: set[str]) -> bool:
    nodes = statement.targets if isinstance(statement, ast.Assign) else \
        [statement.target] if isinstance(statement, ast.AnnAssign) and statement.value is not None else []
    return any(ast.unparse(node) in targets for node in nodes)


#: The statements of a backend's ``__init__`` that decide its SWA pool, in every release: the allocator it reads,
#: the switch, and the pool (``self.swa_kv_pool`` from the resolver on, ``self._swa_kv_pool`` in trtllm_mha, or
#: before aiter's resolver the active pool kept as ``self.token_to_kv_pool`` and translated when the switch is on).
_POOL_STATEMENTS = {"allocator", "self.use_sliding_window_kv_pool", "self.swa_kv_pool", "self._swa_kv_pool",
                    "self.token_to_kv_pool"}


def backend_swa_pool(source: str, class_name: str) -> Callable[[Any], Any]:
    """The SWA pool backend ``class_name`` of this release translates against for a runner, by its own code: its
    ``_resolve_swa_kv_pool`` where it has one, else the statements of its ``__init__`` that decide it."""
    tree = ast.parse(source)
    cls = _class(tree, class_name)
    namespace: dict[str, Any] = {**STAND_INS, "Optional": Any}
    resolver = _method(cls, "_resolve_swa_kv_pool")
    if resolver is not None:
        resolver.decorator_list, resolver.returns = [], None
        for arg in resolver.args.args:
            arg.annotation = None
        exec(compile(ast.Module([resolver], []), f"<{class_name}._resolve_swa_kv_pool>", "exec"), namespace)
    init = _method(cls, "__init__")
    assert init is not None, f"{class_name} has no __init__"
    statements = [s for s in init.body if _assigns_to(s, _POOL_STATEMENTS)]
    assert statements, f"no statement of {class_name}.__init__ decides the SWA pool"
    code = compile(ast.Module(statements, []), f"<{class_name}.__init__>", "exec")

    def decide(runner: Any) -> Any:
        backend = SimpleNamespace()
        if resolver is not None:
            backend._resolve_swa_kv_pool = namespace["_resolve_swa_kv_pool"]
        exec(code, {**namespace, "self": backend, "model_runner": runner})
        for name in ("swa_kv_pool", "_swa_kv_pool"):
            if hasattr(backend, name):
                return getattr(backend, name)
        return backend.token_to_kv_pool if backend.use_sliding_window_kv_pool else None

    return decide


def sliding_window_argument(source: str, window: int) -> set[Any]:
    """What a model file's attention layers store as ``self.sliding_window`` for a sliding layer of a config whose
    ``sliding_window`` is ``window``, by its own expressions (every class that assigns it; module functions they
    call are defined from the same source)."""
    tree = ast.parse(source)
    namespace: dict[str, Any] = {}
    helpers = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("get_attention_")]
    exec(compile(ast.Module(helpers, []), "<model file helpers>", "exec"), namespace)
    values = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["self.sliding_window"]:
            config = SimpleNamespace(sliding_window=window)
            values.add(eval(compile(ast.Expression(node.value), "<sliding_window>", "eval"),
                            {**namespace, "config": config, "layer_type": "sliding_attention"}))
    assert values, "no attention layer of the model file assigns self.sliding_window"
    return values


def asserted_choices(source: str, message: str, subject: str) -> set[Any]:
    """The values a start-up assert of this release accepts: the one ``assert`` whose message holds ``message`` and
    whose test reads ``subject``, as ``x in (...)``, ``x in name`` (the collection assigned to ``name`` just
    before), or ``x is None`` ({None})."""
    tree = ast.parse(source)
    assigned = [(node.lineno, ast.unparse(node.targets[0]), node.value) for node in ast.walk(tree)
                if isinstance(node, ast.Assign) and len(node.targets) == 1]
    asserts = [node for node in ast.walk(tree) if isinstance(node, ast.Assert) and node.msg is not None
               and message in ast.unparse(node.msg) and subject in ast.unparse(node.test)]
    assert len(asserts) == 1, f"{len(asserts)} asserts mention {message!r} on {subject!r}, not one"
    (check,) = asserts
    values: set[Any] = set()
    for compare in (n for n in ast.walk(check.test) if isinstance(n, ast.Compare)):
        (op,), (right,) = compare.ops, compare.comparators
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value is None:
            values.add(None)
        elif isinstance(op, ast.In):
            if isinstance(right, ast.Name):
                right = max((a for a in assigned if a[1] == right.id and a[0] < check.lineno),
                            key=lambda a: a[0])[2]
            values |= set(ast.literal_eval(right))
    assert values, f"the assert on {subject!r} accepts nothing the test can read"
    return values


def draft_layers_budgeted(source: str, class_name: str, runner: Any) -> int:
    """How many draft layers pool configurator ``class_name`` of this release adds to the full pool's per-token
    cost for ``runner`` (a target with its draft's layer count), by the statements of its ``__init__`` that set
    ``self._draft_full_layers_num``; a release with no such statement budgets none."""
    init = _method(_class(ast.parse(source), class_name), "__init__")
    assert init is not None, f"{class_name} has no __init__"
    target = "self._draft_full_layers_num"
    statements = [s for s in init.body if any(isinstance(n, (ast.Assign, ast.AnnAssign)) and _assigns_to(n, {target})
                                              for n in ast.walk(s))]
    configurator = SimpleNamespace(_draft_full_layers_num=0)
    exec(compile(ast.Module(statements, []), f"<{class_name}.__init__>", "exec"), {"self": configurator, "mr": runner})
    return configurator._draft_full_layers_num


#: The TRT-LLM kernels TRTLLMHAAttnBackend calls, by the kit's name for each (its call sites' ``kernel``).
TRTLLM_KERNELS = ("trtllm_batch_decode_with_kv_cache", "trtllm_batch_context_with_kv_cache")


def trtllm_kernel_arguments(source: str) -> dict[str, set[tuple[bool, bool]]]:
    """For each TRT-LLM kernel that ``TRTLLMHAAttnBackend.forward_decode`` / ``forward_extend`` of this release calls:
    ``(passes the layer's window, takes the layer's own page table)`` at each call, read from its arguments:
    ``window_left=layer.sliding_window_size``, and ``block_tables`` from ``self._get_layer_page_table`` (the SWA page
    table on a sliding layer) rather than the one table of full-pool slot ids."""
    cls = _class(ast.parse(source), "TRTLLMHAAttnBackend")
    calls: dict[str, set[tuple[bool, bool]]] = {}
    for name in ("forward_decode", "forward_extend"):
        method = _method(cls, name)
        assert method is not None, f"TRTLLMHAAttnBackend has no {name}"
        layer_tables = {ast.unparse(t) for n in ast.walk(method) if isinstance(n, ast.Assign)
                        and "_get_layer_page_table" in ast.unparse(n.value) for t in n.targets}
        for call in (n for n in ast.walk(method) if isinstance(n, ast.Call)):
            kernel = ast.unparse(call.func).rsplit(".", 1)[-1]
            if kernel not in TRTLLM_KERNELS:
                continue
            given = {k.arg: ast.unparse(k.value) for k in call.keywords}
            calls.setdefault(kernel, set()).add((given.get("window_left") == "layer.sliding_window_size",
                                                 given.get("block_tables") in layer_tables))
    assert calls, "TRTLLMHAAttnBackend's forward methods call no TRT-LLM kernel the test knows"
    return calls
