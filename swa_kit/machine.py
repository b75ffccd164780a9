"""What this machine can run: torch build and devices, Triton, aiter, Jupyter.

Detection never imports aiter into this process: ``import aiter`` calls ``hipconfig``,
``rocminfo`` and ``hipcc`` at import time and raises off ROCm, so the native import is
tried in a child process with a timeout, and the aiter version and file layout are read
from the installed package's metadata and files.

Use :func:`detect` for everything at once (cached; ``detect(refresh=True)`` re-reads),
or the small helpers (:func:`gpu_vendor`, :func:`aiter_version`, :func:`aiter_layout`,
:func:`aiter_native_import`, :func:`tier_availability`) where one fact is enough. The
tier names in :data:`TIERS` are the ones every result reports (see :mod:`swa_kit.lessons.report`).
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import platform
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swa_kit.tiers import (
    TIER_EMULATED,
    TIER_KIT_TRITON,
    TIER_NATIVE,
    TIER_REFERENCE,
    TIER_TORCH,
    TIER_TRITON_GPU,
    TIER_TRITON_INTERPRETER,
    TIERS,
)

#: The amd-aiter release the kit's aiter code is written against (module paths and signatures).
PINNED_AITER = "0.1.7.post2.dev18"


# Files of aiter's Triton unified attention, relative to the installed package directory.
LAYOUT_PINNED = "ops/triton"  # 0.1.7.x: aiter.ops.triton.unified_attention
LAYOUT_MOVED = "ops/triton/attention"  # 0.1.10+: aiter.ops.triton.attention.unified_attention
_UNIFIED_FILES = {
    LAYOUT_PINNED: ("ops/triton/unified_attention.py", "ops/triton/_triton_kernels/unified_attention.py"),
    LAYOUT_MOVED: ("ops/triton/attention/unified_attention.py",),
}

JUPYTER_PACKAGES = ("jupyterlab", "ipykernel", "ipywidgets", "nbclient", "nbconvert", "nbformat", "jupytext")


@dataclass(frozen=True)
class Device:
    """One accelerator as torch sees it."""

    index: int
    name: str
    vendor: str  # "nvidia" or "amd"
    arch: str  # "sm_90", "gfx942", ...
    memory_gib: float


@dataclass(frozen=True)
class Probe:
    """The outcome of one check: whether it worked, and why not (or a caveat when it did)."""

    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class Environment:
    """Everything the kit needs to know about this machine (see :func:`detect`)."""

    python: str
    executable: str
    platform: str
    torch_version: str | None
    torch_build: str | None  # "cuda 12.8", "rocm 6.4", "cpu"; None without torch
    torch_error: str
    devices: tuple[Device, ...]
    gpu_hint: str | None  # a GPU the OS shows but torch does not use ("nvidia"/"amd"), else None
    triton_version: str | None
    triton_distribution: str | None  # "triton" or "pytorch-triton-rocm"
    triton_gpu_backend: str | None  # "nvidia"/"amd" when Triton can compile for a GPU here
    triton_interpreter: Probe
    aiter_version: str | None
    aiter_location: str | None
    aiter_layout: str | None  # LAYOUT_PINNED, LAYOUT_MOVED or None (no unified attention found)
    aiter_native: Probe | None  # None: not checked (detect(check_native=False))
    jupyter: dict[str, str | None] = field(default_factory=dict)

    @property
    def gpu_vendor(self) -> str | None:
        """"nvidia", "amd", or None when torch sees no GPU."""
        return self.devices[0].vendor if self.devices else None

    @property
    def device(self) -> str:
        """The device string results should name: "cuda:0" (also on ROCm) or "cpu"."""
        return "cuda:0" if self.devices else "cpu"

    def tiers(self) -> dict[str, Probe]:
        """Each tier of :data:`TIERS`: whether it can run here, and why not."""
        return tier_availability(self)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpu_vendor"] = self.gpu_vendor
        data["tiers"] = {name: asdict(probe) for name, probe in self.tiers().items()}
        return data


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def _dist_version(*names: str) -> tuple[str | None, str | None]:
    """(version, distribution name) of the first installed distribution among ``names``."""
    for name in names:
        try:
            return importlib.metadata.version(name), name
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


def _torch_facts() -> tuple[str | None, str | None, str, tuple[Device, ...]]:
    try:
        import torch
    except Exception as error:  # a broken torch install is reported, not raised
        return None, None, _first_line(error), ()
    if torch.version.hip:
        build, vendor = f"rocm {torch.version.hip}", "amd"
    elif torch.version.cuda:
        build, vendor = f"cuda {torch.version.cuda}", "nvidia"
    else:
        build, vendor = "cpu", ""
    devices: list[Device] = []
    try:
        count = torch.cuda.device_count() if vendor and torch.cuda.is_available() else 0
        for index in range(count):
            props = torch.cuda.get_device_properties(index)
            arch = getattr(props, "gcnArchName", "") if vendor == "amd" else f"sm_{props.major}{props.minor}"
            devices.append(Device(index, props.name, vendor, arch.split(":")[0], round(props.total_memory / 2**30, 1)))
    except Exception as error:  # a driver problem: torch is there, its GPUs are not usable
        return torch.__version__, build, _first_line(error), ()
    return torch.__version__, build, "", tuple(devices)


def _gpu_hint(devices: tuple[Device, ...]) -> str | None:
    """A GPU the OS exposes while torch uses none (e.g. a CPU build of torch on a GPU machine)."""
    if devices:
        return None
    if Path("/dev/kfd").exists():
        return "amd"
    if Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia/version").exists():
        return "nvidia"
    return None


def _triton_facts() -> tuple[str | None, str | None, str | None, Probe]:
    version, dist = _dist_version("triton", "pytorch-triton-rocm", "pytorch-triton")
    try:
        import triton
    except Exception as error:
        return version, dist, None, Probe(False, _first_line(error))
    version = version or getattr(triton, "__version__", None)
    backend = None
    try:
        from triton.backends import backends

        for name in ("nvidia", "amd"):
            if name in backends and backends[name].driver.is_active():
                backend = name
                break
    except Exception:  # older Triton layouts: no GPU backend we can ask, the interpreter may still work
        backend = None
    if importlib.util.find_spec("triton.runtime.interpreter") is None:
        return version, dist, backend, Probe(False, f"triton {version} has no CPU interpreter (needs triton >= 3.0)")
    return version, dist, backend, Probe(True)


def aiter_version() -> str | None:
    """The installed aiter's version from package metadata (never imports aiter)."""
    return _dist_version("amd-aiter", "aiter")[0]


def aiter_location() -> Path | None:
    """The ``aiter`` package directory that ``import aiter`` would load, found without running it.

    Searches ``sys.path`` directly (not ``sys.modules``, where the kit's aiter loader may
    have registered placeholder packages).
    """
    spec = importlib.machinery.PathFinder.find_spec("aiter")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def aiter_layout(location: Path | None = None) -> str | None:
    """Which module layout the installed aiter's Triton unified attention uses.

    :data:`LAYOUT_PINNED` (0.1.7.x, what the kit's loader reads), :data:`LAYOUT_MOVED`
    (0.1.10 moved the modules under ``aiter.ops.triton.attention``), or None.
    """
    location = location if location is not None else aiter_location()
    if location is None:
        return None
    for layout, files in _UNIFIED_FILES.items():
        if all((location / f).is_file() for f in files):
            return layout
    return None


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def _start_native_import() -> subprocess.Popen | None:
    if aiter_location() is None:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", "import aiter"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, errors="replace", cwd=tempfile.gettempdir(), start_new_session=True,
    )


def _finish_native_import(process: subprocess.Popen | None, timeout: float) -> Probe:
    if process is None:
        return Probe(False, "aiter is not installed")
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # aiter may be compiling with hipcc: kill the whole group so no child holds our pipe open.
        _kill_group(process)
        process.communicate()
        return Probe(False, f"`import aiter` did not finish within {timeout:g} s (it JIT-builds with hipcc on "
                            "first import; run `python -c 'import aiter'` once, then retry)")
    if process.returncode == 0:
        return Probe(True)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return Probe(False, lines[-1] if lines else f"`import aiter` exited with status {process.returncode}")


def aiter_native_import(timeout: float = 60.0) -> Probe:
    """Try ``import aiter`` in a child process (its own session, killed whole on timeout).

    The reason on failure is the last line aiter printed, e.g.
    ``RuntimeError: ROCm version file not found`` on a machine without ROCm.
    """
    return _finish_native_import(_start_native_import(), timeout)


def _jupyter_versions() -> dict[str, str | None]:
    return {name: _dist_version(name)[0] for name in JUPYTER_PACKAGES}


@functools.lru_cache(maxsize=4)
def _detect_cached(native_timeout: float, check_native: bool) -> Environment:
    native = _start_native_import() if check_native else None  # runs while torch and triton import here
    torch_version, torch_build, torch_error, devices = _torch_facts()
    triton_version, triton_dist, triton_backend, interpreter = _triton_facts()
    location = aiter_location()
    return Environment(
        python=platform.python_version(),
        executable=sys.executable,
        platform=f"{platform.system()} {platform.machine()}",
        torch_version=torch_version,
        torch_build=torch_build,
        torch_error=torch_error,
        devices=devices,
        gpu_hint=_gpu_hint(devices),
        triton_version=triton_version,
        triton_distribution=triton_dist,
        triton_gpu_backend=triton_backend,
        triton_interpreter=interpreter,
        aiter_version=aiter_version(),
        aiter_location=str(location) if location else None,
        aiter_layout=aiter_layout(location),
        aiter_native=_finish_native_import(native, native_timeout) if check_native else None,
        jupyter=_jupyter_versions(),
    )


def detect(refresh: bool = False, native_timeout: float = 60.0, check_native: bool = True) -> Environment:
    """Detect this machine once per process.

    The ``import aiter`` check costs seconds (a child process that imports torch and aiter);
    ``check_native=False`` skips it and leaves ``aiter_native`` as None.
    """
    if refresh:
        _detect_cached.cache_clear()
    return _detect_cached(native_timeout, check_native)


def gpu_vendor() -> str | None:
    """"nvidia", "amd", or None when torch sees no GPU."""
    devices = _torch_facts()[3]
    return devices[0].vendor if devices else None


def tier_availability(env: Environment) -> dict[str, Probe]:
    """Whether each of :data:`TIERS` can run on ``env``, with the reason when it cannot."""
    if env.torch_version is None:
        no_torch = Probe(False, f"torch does not import ({env.torch_error})")
        return {tier: no_torch for tier in TIERS}
    if env.aiter_version is None and env.aiter_location is None:
        kernels = Probe(False, f'aiter is not installed (pip install -e ".[aiter]" gives amd-aiter=={PINNED_AITER})')
    elif env.aiter_layout == LAYOUT_MOVED:
        kernels = Probe(False, f"aiter {env.aiter_version} keeps its Triton attention under "
                               "aiter.ops.triton.attention (0.1.10+); the kit's loader reads the "
                               f"{PINNED_AITER} paths: install amd-aiter=={PINNED_AITER} in a separate venv")
    elif env.aiter_layout is None:
        kernels = Probe(False, f"aiter {env.aiter_version} at {env.aiter_location} has no Triton unified_attention")
    else:
        kernels = Probe(True)

    if env.gpu_vendor != "amd":
        native = Probe(False, "needs an AMD GPU with a ROCm build of torch"
                              + (f" (torch here is a {env.torch_build} build)" if env.torch_build else ""))
    elif env.aiter_native is None:
        native = Probe(False, "not checked (detect(check_native=False))")
    elif not env.aiter_native.ok:
        native = Probe(False, f"`import aiter` fails: {env.aiter_native.reason}")
    elif env.aiter_version != PINNED_AITER:
        native = Probe(True, f"aiter {env.aiter_version} is not the {PINNED_AITER} whose signatures the kit's "
                             "native calls follow; its contract test checks them against your install")
    else:
        native = Probe(True)

    if not kernels.ok:
        triton_gpu = triton_cpu = kernels
    else:
        triton_gpu = (Probe(True) if env.triton_gpu_backend and env.devices else
                      Probe(False, "no GPU that Triton can compile for" if env.triton_version else "triton is missing"))
        triton_cpu = env.triton_interpreter if env.triton_version else Probe(False, "triton is missing")
    if env.triton_gpu_backend and env.devices:
        kit_triton = Probe(True)
    else:
        kit_triton = Probe(False, ("no GPU that Triton can compile for" if env.triton_version else "triton is missing")
                           + "; the kit's kernel runs in Triton's interpreter only in a Python started with "
                             "TRITON_INTERPRET=1")
    return {
        TIER_NATIVE: native,
        TIER_TRITON_GPU: triton_gpu,
        TIER_TRITON_INTERPRETER: triton_cpu,
        TIER_EMULATED: Probe(True),
        TIER_TORCH: Probe(True),
        TIER_KIT_TRITON: kit_triton,
        TIER_REFERENCE: Probe(True),
    }
