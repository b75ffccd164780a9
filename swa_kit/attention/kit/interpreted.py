"""Run Triton kernels in Triton's CPU interpreter from any process: a child started with TRITON_INTERPRET=1.

Triton chooses between compiled and interpreted kernels when ``triton`` is first imported
(:func:`interpreter_active` says why), so a process that has already imported it compiled (a notebook
kernel, a test run) cannot switch. :func:`run_in_interpreter` saves a function and its arguments, calls
it in a fresh Python started with the variable set, and reads its result back: a CPU learner sees the
kernel itself run, at interpreter speed (tiny batches only). It knows no kernel: the caller passes the
function to run (:func:`swa_kit.attention.kit.path.run_interpreted`, :mod:`swa_kit.attention.kit.teaching`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from swa_kit.errors import PathUnavailableError, UsageError

#: Where ``swa_kit`` lives, put first on the child's path so that it imports this very copy.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])

T = TypeVar("T")


def interpreter_active() -> bool:
    """Whether this process runs Triton kernels in the CPU interpreter.

    ``triton.jit`` reads ``TRITON_INTERPRET`` when it decorates a function, and Triton
    decorates its own library functions (``tl.zeros``, ``tl.max``...) when ``triton`` is
    first imported. An interpreted kernel calling a compiled ``tl.zeros`` fails, so the
    variable must be set before anything imports triton: a process is interpreted or it
    is not. That is why a CPU run of a kernel starts a child process with it.
    """
    try:
        import triton.language as tl
    except ImportError:
        return False
    return type(tl.zeros).__name__ == "InterpretedFunction"


def refuse_bfloat16(path: str, dtype: torch.dtype) -> None:
    """Refuse bfloat16 in Triton's CPU interpreter. It keeps bfloat16 values as their raw 16-bit patterns, and its
    ``tl.dot`` multiplies those patterns (triton-lang/triton#11584; Triton 3.6 and 3.9 alike): attention outputs near
    1e9, without an error. ``tests/test_interpreted.py`` checks that this still holds."""
    if dtype == torch.bfloat16:
        raise PathUnavailableError(
            f"{path}: bfloat16 in Triton's CPU interpreter, whose tl.dot multiplies bfloat16's raw bit patterns "
            "(triton-lang/triton#11584) and returns garbage without an error; run the batch in float16 on the CPU, "
            "or in bfloat16 on a GPU"
        )


def run_in_interpreter(fn: Callable[..., T], *args: Any, timeout_s: float = 300) -> T:
    """``fn(*args)`` in a child Python started with ``TRITON_INTERPRET=1``; its result, read back.

    ``fn`` must be a module-level function of an importable module: the child imports it by name, from the same copy
    of ``swa_kit`` as this process (a checkout may differ from the installed kit), and the result says which file it
    ran. Raises :class:`~swa_kit.errors.PathUnavailableError` when Triton is missing, when the child fails (with its
    last error lines) or when it ran another copy of ``fn``'s module.
    """
    module = sys.modules.get(fn.__module__)
    module_file = getattr(module, "__file__", None)
    if fn.__module__ == "__main__" or module_file is None or getattr(module, fn.__qualname__, None) is not fn:
        raise UsageError(f"run_in_interpreter: {fn.__qualname__!r} of module {fn.__module__!r} cannot be imported by "
                         "name in a child process; pass a function defined at the top level of an importable module")
    try:
        import triton  # noqa: F401  (only whether it is installed)
    except ImportError:
        raise PathUnavailableError("Triton is not installed here (it needs Linux or WSL): pip install triton") \
            from None
    with tempfile.TemporaryDirectory(prefix="swa_kit_interp_") as tmp:
        path = Path(tmp) / "call.pt"
        torch.save({"fn": fn, "args": args}, path)
        env = {**os.environ, "TRITON_INTERPRET": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
        child = subprocess.run([sys.executable, "-m", __name__, str(path)], env=env, capture_output=True, text=True,
                               timeout=timeout_s, check=False)
        if child.returncode != 0:
            raise PathUnavailableError(f"the interpreted kernel failed in its child process: {child.stderr[-1500:]}")
        answer = torch.load(path.with_suffix(".out.pt"), weights_only=False)  # written by our own child
    if Path(answer["module_file"]).resolve() != Path(module_file).resolve():
        raise PathUnavailableError(f"the interpreter's child ran {answer['module_file']}, not {module_file}: "
                                      "put this checkout first on PYTHONPATH")
    return answer["result"]


def _child(path: str) -> None:
    if not interpreter_active():
        raise SystemExit("TRITON_INTERPRET=1 did not take effect: triton was imported before it was set")
    call = torch.load(path, weights_only=False)  # written by run_in_interpreter in the parent
    fn = call["fn"]
    result = fn(*call["args"])
    torch.save({"result": result, "module_file": sys.modules[fn.__module__].__file__},
               Path(path).with_suffix(".out.pt"))


if __name__ == "__main__":
    _child(sys.argv[1])
