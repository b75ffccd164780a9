"""Run the kit's Triton kernel in Triton's CPU interpreter from any process: a child started with TRITON_INTERPRET=1.

Triton chooses between compiled and interpreted kernels when ``triton`` is first imported
(:func:`swa_kit.attention.kit.kernel.interpreter_active` says why), so a process that has already
imported it compiled (a notebook kernel, a test run) cannot switch. :func:`run_in_interpreter` saves
the batch, runs the kernel on it in a fresh Python started with the variable set, and reads the
output back: a CPU learner sees the kernel itself run, at interpreter speed (tiny batches only).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from swa_kit.attention.batch import AttentionBatch, AttentionResult
from swa_kit.errors import PathUnavailableError

#: Where ``swa_kit`` lives, put first on the child's path so it imports this very copy.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


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


def run_in_interpreter(batch: AttentionBatch, keys: Any, timeout_s: float = 300) -> AttentionResult:
    """The kit's kernel on ``batch`` with a window of ``keys`` keys, in Triton's CPU interpreter (child process).

    Raises :class:`~swa_kit.errors.PathUnavailableError` when Triton is missing or the child fails,
    with the child's last error lines.
    """
    from swa_kit.attention.kit import kernel as kit_triton

    if kit_triton.triton is None:
        raise PathUnavailableError("Triton is not installed here (it needs Linux or WSL): pip install triton")
    if batch.device.type != "cpu":
        raise PathUnavailableError(f"the interpreter runs CPU tensors; this batch is on {batch.device}")
    with tempfile.TemporaryDirectory(prefix="swa_kit_interp_") as tmp:
        path = Path(tmp) / "batch.pt"
        torch.save({"batch": batch, "keys": keys}, path)
        env = {**os.environ, "TRITON_INTERPRET": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
        child = subprocess.run([sys.executable, "-m", __name__, str(path)], env=env, capture_output=True, text=True,
                               timeout=timeout_s, check=False)
        if child.returncode != 0:
            raise PathUnavailableError(f"the interpreted kernel failed in its child process: {child.stderr[-1500:]}")
        out = torch.load(path.with_suffix(".out.pt"))
    # the tier says "interpreter", as aiter's interpreted kernel's does (announce wants one word per field)
    return AttentionResult(out, path="kit_triton_swa", tier="kit-triton-interpreter", device="cpu")


def _child(path: str) -> None:
    from swa_kit.attention.kit import kernel as kit_triton

    if not kit_triton.interpreter_active():
        raise SystemExit("TRITON_INTERPRET=1 did not take effect: triton was imported before it was set")
    payload = torch.load(path, weights_only=False)  # written by run_in_interpreter in the parent
    batch = payload["batch"]
    out = torch.full_like(batch.q, float("nan"))  # every element the kernel leaves unwritten stays NaN
    kit_triton.plan_batch(batch, payload["keys"]).run(batch.q, out)
    torch.save(out, Path(path).with_suffix(".out.pt"))


if __name__ == "__main__":
    _child(sys.argv[1])
