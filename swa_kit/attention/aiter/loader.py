"""Load aiter's own Triton kernels from the installed amd-aiter wheel, with or without ROCm.

``import aiter`` only works on a ROCm machine: the package ``__init__`` (aiter 0.1.7's
``aiter/__init__.py``) runs ``hipconfig`` and ``rocminfo`` and JIT-builds a HIP module. The Triton kernel files under
``aiter/ops/triton/_triton_kernels/`` need nothing of that: only triton, torch and
``aiter.ops.triton.utils.types`` (which asks the GPU for its arch at import). So, where the
real package cannot be imported, this module registers *placeholder* package modules for
``aiter``, ``aiter.ops``, ``aiter.ops.triton`` and ``aiter.ops.triton.utils`` whose
``__path__`` points into the installed wheel (their ``__init__`` files never run) and supplies
``utils.types`` itself. Where ``import aiter`` works (ROCm), the real package is used and
nothing is registered.

Kernel files are executed from their path under private module names, twice if needed:
Triton decides at *decoration* time whether ``@triton.jit`` builds a compiled ``JITFunction``
or an ``InterpretedFunction`` (it reads ``TRITON_INTERPRET`` when the decorator runs, never
at launch). One process that wants both (CUDA tensors and CPU tensors) therefore needs two
copies of the module, one decorated in each mode: :func:`load_kernel_module` builds each copy
under a forced setting of that knob and caches it.

Triton's own standard library (``tl.zeros``, ``tl.max``, ``tl.sum``...) is also made of
``@triton.jit`` functions, decorated once when ``triton.language`` was imported, normally in
compiled mode. An interpreted kernel that calls them fails ("Cannot call @triton.jit'd outside
of the scope of a kernel"). :func:`interpreted_stdlib` swaps them for interpreted twins for
the duration of one interpreted launch (under a lock) and restores them afterwards, which is
what setting ``TRITON_INTERPRET=1`` before importing triton would have given for the whole
process. It also undoes the patches the interpreter leaves on ``triton.language``, so that a
compile later in the same process (a GPU launch, or ``benchmarks/kernel_resources.py``) works.

Module paths are pinned: amd-aiter 0.1.10 moved the attention kernels to
``aiter.ops.triton.attention.*``; other layouts are refused with the version named.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import threading
import types
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from swa_kit.errors import PathUnavailableError

DISTRIBUTION = "amd-aiter"
#: The wheel whose module layout this loader was written against (pyproject's ``aiter`` extra).
PINNED_VERSION = "0.1.7.post2.dev18"
#: First release that moved the attention kernels to ``aiter.ops.triton.attention.*``.
MOVED_IN = (0, 1, 10)

#: Kernel modules the kit knows, relative to the ``aiter`` package directory.
KERNEL_FILES = {
    "unified_attention": "ops/triton/_triton_kernels/unified_attention.py",
    "pa_decode": "ops/triton/_triton_kernels/pa_decode.py",
}

_PLACEHOLDER_PACKAGES = ("aiter", "aiter.ops", "aiter.ops.triton", "aiter.ops.triton.utils")
_TYPES_MODULE = "aiter.ops.triton.utils.types"
_PRIVATE_PREFIX = "swa_kit._aiter_kernels"


def aiter_version() -> str | None:
    """The installed amd-aiter version (from its metadata; aiter itself is not imported)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def aiter_package_dir() -> Path | None:
    """Directory of the installed ``aiter`` package, found through its distribution metadata."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file("aiter")))
    return path if (path / "__init__.py").is_file() else None


def _is_placeholder(module: types.ModuleType | None) -> bool:
    return bool(getattr(module, "__swa_kit_placeholder__", False))


@lru_cache(maxsize=1)
def torch_build() -> types.ModuleType | None:
    """torch's own ``torch/version.py`` (``__version__``, ``cuda``, ``hip``), loaded alone (None: no torch).

    Planning a route asks whether aiter's native ops run here; off ROCm the answer is no, and importing torch to
    learn its build would cost a second.
    """
    if "torch" in sys.modules:
        return sys.modules["torch"].version
    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    folders = list(spec.submodule_search_locations or ()) if spec else []
    version = importlib.util.spec_from_file_location("swa_kit._torch_version", Path(folders[0]) / "version.py") \
        if folders else None
    if version is None or version.loader is None:
        return None
    module = importlib.util.module_from_spec(version)
    version.loader.exec_module(module)
    return module


@lru_cache(maxsize=1)
def native_aiter_status() -> tuple[bool, str]:
    """Whether the real ``import aiter`` works here, tried at most once per process.

    Off ROCm the answer is no without trying: aiter's import would shell out to
    ``hipconfig``/``rocminfo`` and fail (aiter 0.1.7's package ``__init__``), noisily and slowly.
    """
    torch_version = torch_build()
    if torch_version is None:
        return False, "needs torch: it is not installed"
    if getattr(torch_version, "hip", None) is None:
        build = f"CUDA {torch_version.cuda}" if torch_version.cuda else "CPU-only"
        return False, (f"needs ROCm: torch {torch_version.__version__} is a {build} build, "
                       "and aiter's import needs hipcc/rocminfo")
    if aiter_version() is None:
        return False, f"needs ROCm aiter: {DISTRIBUTION} is not installed (pip install 'swa_kit[aiter]' or build aiter)"
    existing = sys.modules.get("aiter")
    if _is_placeholder(existing):
        return False, "this process already registered swa_kit's placeholder aiter package; start a fresh process"
    try:
        importlib.import_module("aiter")
    except Exception as exc:  # aiter's import can fail in many ways (missing hipcc, JIT build errors)
        return False, f"import aiter failed on this ROCm machine: {type(exc).__name__}: {exc}"
    return True, f"aiter {aiter_version()} imported natively (torch HIP {torch_version.hip})"


def native_status() -> tuple[bool, str]:
    """Whether aiter's native ops run here: ``import aiter`` works (a ROCm build of aiter) and torch sees the GPU.

    The native paths' availability (:mod:`swa_kit.attention.paths`): here rather than beside the ops, so that
    planning a route asks it without importing them.
    """
    ok, reason = native_aiter_status()
    if not ok:
        return ok, reason
    import torch  # aiter imported, so torch is loaded already

    if not torch.cuda.is_available():
        return False, "needs ROCm: aiter imports but torch sees no GPU"
    return ok, reason


def _check_layout() -> Path:
    version = aiter_version()
    root = aiter_package_dir()
    if version is None or root is None:
        raise PathUnavailableError(
            f"aiter's Triton kernels need the {DISTRIBUTION} package: pip install 'swa_kit[aiter]' "
            f"(pins {DISTRIBUTION}=={PINNED_VERSION})"
        )
    if _release(version) >= MOVED_IN:
        raise PathUnavailableError(
            f"{DISTRIBUTION} {version} keeps its attention kernels under aiter.ops.triton.attention.* "
            f"(moved in {'.'.join(map(str, MOVED_IN))}); swa_kit loads the layout of {PINNED_VERSION}: "
            f"pip install '{DISTRIBUTION}=={PINNED_VERSION}'"
        )
    missing = [rel for rel in KERNEL_FILES.values() if not (root / rel).is_file()]
    if missing:
        raise PathUnavailableError(
            f"{DISTRIBUTION} {version} at {root} lacks {missing}; swa_kit expects the layout of {PINNED_VERSION}"
        )
    return root


def _placeholder(name: str, path: Path, reason: str) -> types.ModuleType:
    module = types.ModuleType(name, f"swa_kit placeholder for {name}: its ROCm-bound __init__ was skipped")
    module.__path__ = [str(path)]
    module.__file__ = None
    vars(module)["__swa_kit_placeholder__"] = True  # set in the namespace: ModuleType declares no such attribute

    def __getattr__(attr: str) -> None:  # what the skipped __init__ would have defined
        raise AttributeError(
            f"{name}.{attr}: this {name!r} is swa_kit's placeholder (real aiter unavailable: {reason}); "
            "only aiter's Triton kernel files can be loaded without ROCm"
        )

    vars(module)["__getattr__"] = __getattr__  # PEP 562: a module's __getattr__ lives in its namespace
    return module


def _types_module(reason: str) -> types.ModuleType:
    """Stand-in for ``aiter.ops.triton.utils.types`` without its GPU-arch query at import.

    The kernels use only ``e4m3_dtype`` (for FP8 output clamping, unused by the kit). The OCP
    ``float8_e4m3fn`` is what aiter picks on gfx950 and the fp8 type NVIDIA GPUs have.
    """
    import torch

    module = _placeholder(_TYPES_MODULE, Path("."), reason)
    del module.__path__
    vars(module).update(e4m3_dtype=torch.float8_e4m3fn, e5m2_dtype=torch.float8_e5m2,
                        get_fp8_dtypes=lambda: (torch.float8_e5m2, torch.float8_e4m3fn))
    return module


def _install_placeholders(root: Path) -> None:
    ok, reason = native_aiter_status()
    if ok:
        return  # the real package imports: its own modules serve the kernels' imports
    existing = sys.modules.get("aiter")
    if existing is not None and not _is_placeholder(existing):
        return  # someone imported a real aiter already: never shadow it
    for name in _PLACEHOLDER_PACKAGES:
        if name not in sys.modules:
            rel = name.split(".")[1:]
            sys.modules[name] = _placeholder(name, root.joinpath(*rel), reason)
    if _TYPES_MODULE not in sys.modules:
        sys.modules[_TYPES_MODULE] = _types_module(reason)


@contextlib.contextmanager
def _interpret_mode(interpret: bool) -> Iterator[None]:
    """Force Triton's decoration-time interpreter switch, restoring it afterwards."""
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is not None and hasattr(knobs, "runtime"):
        with knobs.runtime.scope():
            knobs.runtime.interpret = interpret
            yield
        return
    old = os.environ.get("TRITON_INTERPRET")  # Triton < 3.4 reads the variable directly
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


_STDLIB_LOCK = threading.Lock()


@contextlib.contextmanager
def interpreted_stdlib() -> Iterator[None]:
    """Make ``triton.language``'s jit-decorated helpers interpretable during one interpreted launch, and leave
    ``triton.language`` as it found it.

    A no-op when triton was imported with ``TRITON_INTERPRET=1`` (they are interpreted already).
    Holds a lock: a GPU compile in another thread must not see the swapped helpers. On the way out every
    attribute of ``triton.language``'s modules and classes gets its value from before the launch back, the
    interpreter's own patches included: Triton's interpreter (3.6 and 3.9) patches the language's builtins for
    each helper a kernel calls and never undoes that, and a compile later in the process then fails in the
    interpreter's builder (``'block_argument' object has no attribute 'get_element_ty'``).
    """
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    with contextlib.suppress(ImportError):  # imported lazily at launch; it must see the originals
        importlib.import_module("triton.experimental.gluon")
    with _STDLIB_LOCK:
        saved = [(owner, dict(vars(owner))) for owner in _language_namespaces()]
        twins: dict[int, InterpretedFunction] = {}
        try:
            for owner, attributes in saved:
                for name, value in attributes.items():
                    if isinstance(value, JITFunction):
                        setattr(owner, name, twins.setdefault(id(value), InterpretedFunction(value.fn)))
            yield
        finally:
            for owner, attributes in saved:
                _restore_attributes(owner, attributes)


def _language_namespaces() -> list[object]:
    """``triton.language``'s modules and the classes they define: what an interpreted launch patches."""
    modules = [m for n, m in list(sys.modules.items()) if n.startswith("triton.language") and m is not None]
    classes = {id(v): v for m in modules for v in vars(m).values()
               if isinstance(v, type) and v.__module__.startswith("triton.language")}
    return modules + list(classes.values())


def _restore_attributes(owner: object, attributes: dict[str, object]) -> None:
    """Give ``owner`` back the values its ``attributes`` had. Names added since stay: the interpreter adds the
    globals its rewritten functions read (``interpreter_semantic``) and keeps those functions cached."""
    now = vars(owner)
    for name, value in attributes.items():
        if now.get(name, _MISSING) is not value:
            setattr(owner, name, value)


_MISSING = object()


_CACHE: dict[tuple[str, bool], types.ModuleType] = {}


def load_kernel_module(name: str, *, interpreted: bool) -> types.ModuleType:
    """aiter's kernel module ``name`` (see :data:`KERNEL_FILES`), decorated for the GPU or the interpreter."""
    if name not in KERNEL_FILES:
        raise PathUnavailableError(f"unknown aiter kernel module {name!r}; known: {', '.join(KERNEL_FILES)}")
    key = (name, interpreted)
    if key in _CACHE:
        return _CACHE[key]
    root = _check_layout()
    _install_placeholders(root)
    mode = "interpreter" if interpreted else "gpu"
    module_name = f"{_PRIVATE_PREFIX}.{mode}.{name}"
    spec = importlib.util.spec_from_file_location(module_name, root / KERNEL_FILES[name])
    if spec is None or spec.loader is None:
        raise PathUnavailableError(f"{root / KERNEL_FILES[name]} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    with _interpret_mode(interpreted):
        spec.loader.exec_module(module)
    vars(module)["__swa_kit_source__"] = f"{DISTRIBUTION} {aiter_version()}: aiter/{KERNEL_FILES[name]}"
    _CACHE[key] = module
    return module


def load_unified_attention_kernels(*, interpreted: bool = False) -> types.ModuleType:
    """aiter's ``kernel_unified_attention_2d``/``_3d`` and ``reduce_segments`` (one module)."""
    return load_kernel_module("unified_attention", interpreted=interpreted)


def aiter_triton_status() -> tuple[bool, str]:
    """Whether aiter's Triton kernels load here, and where they can run."""
    try:
        import torch
        import triton
    except ImportError as exc:
        return False, f"needs triton and torch: {exc}"
    try:
        load_unified_attention_kernels(interpreted=True)
    except PathUnavailableError as exc:
        return False, str(exc)
    except Exception as exc:  # a kernel file that no longer imports with this triton
        return False, f"aiter {aiter_version()}'s unified_attention kernels failed to load: {type(exc).__name__}: {exc}"
    where = ["Triton's CPU interpreter"]
    if torch.cuda.is_available():
        where.insert(0, f"GPU ({torch.cuda.get_device_name()})")
    return True, f"aiter {aiter_version()} Triton kernels (triton {triton.__version__}) on " + " and ".join(where)
