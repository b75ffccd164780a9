"""``swa-kit doctor``: what this machine can run, what is missing, and what that means for the kit.

:func:`diagnose` turns an :class:`~swa_kit.machine.Environment` into findings; each
finding that is not ``ok`` says why and what it costs. Only a missing *required* piece
(a Python too old, or torch) is an ``error``; a CPU-only machine is a supported set-up.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

from swa_kit.exit_codes import ExitCode
from swa_kit.machine import (
    LAYOUT_MOVED,
    LAYOUT_PINNED,
    PINNED_AITER,
    TIER_TRITON_GPU,
    TIER_TRITON_INTERPRETER,
    TIERS,
    Environment,
    Probe,
)

OK, MISSING, ERROR, NOTE = "ok", "missing", "error", "note"
MIN_PYTHON = (3, 10)
_LOADER = "swa_kit.attention.aiter.loader"


@dataclass(frozen=True)
class Finding:
    """One line of the doctor's report."""

    name: str
    status: str  # ok, note (works, with a caveat), missing (the kit runs with less), error (the kit cannot run)
    found: str
    reason: str = ""  # why it is missing or what the caveat is
    impact: str = ""  # what it means for the kit


def _aiter_triton_probe(env: Environment) -> tuple[Probe, str]:
    """Whether aiter's Triton kernels load without ROCm: through the kit's loader where it is safe, else by files.

    Returns the probe and how it was decided ("loader" or "files").
    """
    if env.aiter_location is None:
        return Probe(False, "aiter is not installed"), "files"
    if env.aiter_layout == LAYOUT_MOVED:
        return Probe(False, f"aiter {env.aiter_version} moved its Triton attention to aiter.ops.triton.attention.* "
                            f"(0.1.10+); the kit's loader is written against {PINNED_AITER}'s "
                            "aiter.ops.triton.unified_attention"), "files"
    if env.aiter_layout != LAYOUT_PINNED:
        return Probe(False, f"no ops/triton/unified_attention.py with _triton_kernels/unified_attention.py "
                            f"under {env.aiter_location}"), "files"
    rocm = (env.torch_build or "").startswith("rocm")
    if rocm and not (env.aiter_native and env.aiter_native.ok):
        # On ROCm the loader imports the real aiter in this process; that import just failed or hung.
        return Probe(True, "kernel files present (not loaded: `import aiter` fails here, see above)"), "files"
    if importlib.util.find_spec(_LOADER) is None or env.triton_version is None or env.torch_version is None:
        return Probe(True, "kernel files present (checked by file, not loaded)"), "files"
    ok, reason = importlib.import_module(_LOADER).aiter_triton_status()
    return Probe(ok, reason), "loader"


def _python_findings(env: Environment, add: Callable[[Finding], None]) -> None:
    py_ok = sys.version_info[:2] >= MIN_PYTHON
    add(Finding("python", OK if py_ok else ERROR, f"{env.python} ({env.executable})",
                "" if py_ok else f"the kit needs Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}",
                "" if py_ok else "nothing in the kit runs: use a newer Python"))


def _torch_findings(env: Environment, add: Callable[[Finding], None]) -> None:
    if env.torch_version is None:
        add(Finding("torch", ERROR, "not importable", env.torch_error,
                    "nothing in the kit runs; install a torch build for this machine (CPU: pip install torch "
                    "--index-url https://download.pytorch.org/whl/cpu; ROCm: see README, 'On AMD GPUs')"))
    else:
        add(Finding("torch", OK, f"{env.torch_version} ({env.torch_build} build)"))


def _device_findings(env: Environment, add: Callable[[Finding], None]) -> None:
    if env.devices:
        described = "; ".join(f"{d.index}: {d.name} ({d.vendor}, {d.arch}, {d.memory_gib} GiB)" for d in env.devices)
        add(Finding("devices", OK, described))
    else:
        reason = "torch sees no GPU"
        if env.gpu_hint:
            reason += (f", but this machine exposes an {env.gpu_hint.upper() if env.gpu_hint == 'amd' else 'NVIDIA'} "
                       f"GPU: torch here is a {env.torch_build} build")
        elif env.torch_error:
            reason += f" ({env.torch_error})"
        impact = ("CPU only: the reference and emulated paths run, and aiter's Triton kernels run in Triton's CPU "
                  "interpreter (small shapes); GPU paths and GPU tests are skipped")
        if env.gpu_hint == "amd":
            impact += "; install a ROCm build of torch to use the GPU"
        elif env.gpu_hint == "nvidia":
            impact += "; install a CUDA build of torch to use the GPU"
        add(Finding("devices", NOTE if env.gpu_hint is None else MISSING, "CPU only", reason, impact))


def _triton_findings(env: Environment, add: Callable[[Finding], None]) -> None:
    if env.triton_version is None:
        add(Finding("triton", MISSING, "not installed", env.triton_interpreter.reason or "no triton distribution",
                    "aiter's Triton kernels cannot run (neither on a GPU nor in the interpreter); reference and "
                    "emulated paths still do. On ROCm, Triton comes with torch as pytorch-triton-rocm"))
    elif env.triton_gpu_backend:
        add(Finding("triton", OK, f"{env.triton_version} ({env.triton_distribution}), GPU backend: "
                                  f"{env.triton_gpu_backend}; CPU interpreter "
                                  f"{'usable' if env.triton_interpreter.ok else 'unusable'}"))
    elif env.triton_interpreter.ok:
        add(Finding("triton", NOTE, f"{env.triton_version} ({env.triton_distribution}), CPU interpreter only",
                    "no GPU that Triton can compile for",
                    "aiter's Triton kernels run in the CPU interpreter (TRITON_INTERPRET=1): exact but slow, small "
                    "shapes only"))
    else:
        add(Finding("triton", MISSING, f"{env.triton_version}, no GPU backend and no interpreter",
                    env.triton_interpreter.reason, "aiter's Triton kernels cannot run here"))


def _aiter_findings(env: Environment, add: Callable[[Finding], None]) -> None:
    if env.aiter_location is None:
        add(Finding("aiter", MISSING, "not installed", "no amd-aiter distribution and no aiter package on sys.path",
                    f'no aiter tiers; install the pinned release with pip install -e ".[aiter]" '
                    f"(amd-aiter=={PINNED_AITER})"))
    else:
        version = env.aiter_version or "unknown version"
        where = f"{version} at {env.aiter_location}"
        if env.aiter_layout == LAYOUT_MOVED:
            add(Finding("aiter", MISSING, where,
                        f"{version} keeps its Triton attention under aiter.ops.triton.attention.* (moved in 0.1.10); "
                        f"the kit's aiter Triton loader is written against {PINNED_AITER}'s module paths",
                        "the aiter Triton tiers are off; your aiter is left as it is. For them, use a separate venv "
                        f"with amd-aiter=={PINNED_AITER}"))
        elif env.aiter_version != PINNED_AITER:
            add(Finding("aiter", NOTE, where, f"the kit is written against {PINNED_AITER}",
                        "its module layout matches the kit's loader; results may differ where aiter changed"))
        else:
            add(Finding("aiter", OK, f"{where} (the kit's pinned release)"))


def _aiter_native_findings(env: Environment, add: Callable[[Finding], None]) -> None:
    native = env.aiter_native or Probe(False, "not checked")
    add(Finding("aiter native import", OK if native.ok else MISSING,
                "imports" if native.ok else "does not import", native.reason if not native.ok else "",
                "" if native.ok else "the native tier (aiter's compiled CK/asm ops that SGLang calls) cannot run "
                "here; the kit runs those ops as labelled emulations and aiter's Triton kernels instead"))


def _aiter_triton_and_tier_findings(env: Environment, add: Callable[[Finding], None]) -> None:
    triton_probe, how = _aiter_triton_probe(env)
    add(Finding("aiter Triton kernels", OK if triton_probe.ok else MISSING,
                ("loaded without ROCm" if how == "loader" else "files present") if triton_probe.ok
                else "not loadable", triton_probe.reason,
                "" if triton_probe.ok else "the aiter-triton tiers are off; reference and emulated paths still run"))
    tiers = env.tiers()
    if not triton_probe.ok:  # the loader knows better than the file check
        tiers[TIER_TRITON_GPU] = tiers[TIER_TRITON_INTERPRETER] = triton_probe
    for tier, probe in tiers.items():
        add(Finding(f"tier {tier}", (NOTE if probe.reason else OK) if probe.ok else MISSING,
                    "available" if probe.ok else "unavailable", probe.reason))


def _jupyter_findings(env: Environment, add: Callable[[Finding], None]) -> None:
    for package, version in env.jupyter.items():
        if version:
            add(Finding(package, OK, version))
        else:
            add(Finding(package, MISSING, "not installed", f"no {package} distribution",
                        'swa-kit tour, swa-kit lab and the notebooks need it: pip install "swa_kit[notebooks]"'))


def diagnose(env: Environment) -> list[Finding]:
    """The doctor's findings for ``env``, most fundamental first."""
    findings: list[Finding] = []
    for topic in (_python_findings, _torch_findings, _device_findings, _triton_findings, _aiter_findings,
                  _aiter_native_findings, _aiter_triton_and_tier_findings, _jupyter_findings):
        topic(env, findings.append)
    return findings


def exit_code(findings: list[Finding]) -> ExitCode:
    """``OK`` unless something the kit cannot run without is missing (``DISAGREES``)."""
    return ExitCode.DISAGREES if any(f.status == ERROR for f in findings) else ExitCode.OK


def render_text(findings: list[Finding]) -> str:
    """A compact report: one line per finding, with why and what it means below anything not ok."""
    marks = {OK: "ok", NOTE: "--", MISSING: "!!", ERROR: "XX"}
    width = max(len(f.name) for f in findings)
    lines = ["swa-kit doctor   (ok = fine, -- = works with a caveat, !! = missing, XX = the kit cannot run)"]
    for f in findings:
        lines.append(f"  {marks[f.status]}  {f.name.ljust(width)}  {f.found}")
        if f.reason:
            label = "why:  " if f.status in (MISSING, ERROR) else "note: "
            lines.append(f"      {''.ljust(width)}  {label} {f.reason}")
        if f.impact:
            lines.append(f"      {''.ljust(width)}  means: {f.impact}")
    usable = [t for t in TIERS if any(f.name == f"tier {t}" and f.status in (OK, NOTE) for f in findings)]
    lines.append(f"Compute tiers usable here: {', '.join(usable) or 'none'}")
    return "\n".join(lines)


def report(env: Environment) -> dict:
    """The doctor's JSON: the detected environment plus the findings."""
    findings = diagnose(env)
    return {"environment": env.to_dict(), "findings": [asdict(f) for f in findings],
            "exit_code": int(exit_code(findings))}
