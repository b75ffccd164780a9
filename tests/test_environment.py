"""Environment detection: facts checked against torch/metadata directly, layouts and tiers on synthetic installs."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from swa_kit import machine as envmod
from swa_kit.machine import (
    LAYOUT_MOVED,
    LAYOUT_PINNED,
    PINNED_AITER,
    TIER_EMULATED,
    TIER_KIT_TRITON,
    TIER_NATIVE,
    TIER_REFERENCE,
    TIER_TORCH,
    TIER_TRITON_GPU,
    TIER_TRITON_INTERPRETER,
    TIERS,
    Device,
    Probe,
    aiter_layout,
    aiter_native_import,
    detect,
    gpu_vendor,
    tier_availability,
)


@pytest.fixture(scope="module")
def env():
    return detect()


def test_torch_facts_match_torch(env):
    assert env.torch_version == torch.__version__
    expected_build = (f"rocm {torch.version.hip}" if torch.version.hip else
                      f"cuda {torch.version.cuda}" if torch.version.cuda else "cpu")
    assert env.torch_build == expected_build
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert len(env.devices) == gpus
    assert env.device == ("cuda:0" if gpus else "cpu")
    expected_vendor = None if not gpus else ("amd" if torch.version.hip else "nvidia")
    assert env.gpu_vendor == gpu_vendor() == expected_vendor


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def test_versions_come_from_metadata(env):
    assert env.aiter_version == _version("amd-aiter")
    assert env.jupyter == {name: _version(name) for name in envmod.JUPYTER_PACKAGES}
    assert env.python == ".".join(map(str, sys.version_info[:3]))


def test_detection_does_not_import_aiter(env):
    assert "aiter" not in sys.modules or getattr(sys.modules["aiter"], "__swa_kit_placeholder__", False)


@pytest.mark.skipif(torch.version.hip is not None, reason="aiter may import natively on ROCm")
def test_native_import_fails_off_rocm_with_aiters_reason(env):
    if env.aiter_location is None:
        pytest.skip("aiter not installed")
    assert env.aiter_native is not None and not env.aiter_native.ok
    assert "ROCm" in env.aiter_native.reason or "hip" in env.aiter_native.reason.lower()


def test_to_dict_is_json_ready(env):
    import json

    data = json.loads(json.dumps(env.to_dict()))
    assert set(data["tiers"]) == set(TIERS)
    assert data["gpu_vendor"] == env.gpu_vendor


# --- aiter file layouts ------------------------------------------------------------------------------------------

def _touch(root: Path, *files: str) -> Path:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    return root


@pytest.mark.parametrize("files, expected", [
    (("ops/triton/unified_attention.py", "ops/triton/_triton_kernels/unified_attention.py"), LAYOUT_PINNED),
    (("ops/triton/attention/unified_attention.py", "ops/triton/_triton_kernels/attention/unified_attention.py"),
     LAYOUT_MOVED),
    (("ops/triton/unified_attention.py",), None),  # the kernel file is missing
    ((), None),
])
def test_aiter_layout(tmp_path, files, expected):
    assert aiter_layout(_touch(tmp_path / "aiter", "__init__.py", *files)) == expected


def test_installed_aiter_has_the_pinned_layout(env):
    if env.aiter_version != PINNED_AITER:
        pytest.skip(f"aiter {env.aiter_version} is not the pinned release")
    assert env.aiter_layout == LAYOUT_PINNED


# --- the native import check, on fake aiter packages ------------------------------------------------------------

@pytest.fixture
def fake_aiter(tmp_path, monkeypatch):
    """Write ``aiter/__init__.py`` with the given body and make it the ``aiter`` of this process and its children."""
    def make(body: str) -> Path:
        package = tmp_path / "aiter"
        package.mkdir()
        (package / "__init__.py").write_text(textwrap.dedent(body))
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
        return tmp_path
    return make


def test_native_import_reports_the_last_line(fake_aiter):
    fake_aiter("""
        print("[aiter] noisy log line")
        raise RuntimeError("ROCm version file not found")
    """)
    probe = aiter_native_import(timeout=30)
    assert probe == Probe(False, "RuntimeError: ROCm version file not found")


def test_native_import_success(fake_aiter):
    fake_aiter("VALUE = 1\n")
    assert aiter_native_import(timeout=30) == Probe(True)


def test_native_import_times_out_and_kills_the_whole_group(fake_aiter):
    root = fake_aiter("""
        import pathlib, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # like hipcc, holds stdout
        pathlib.Path(__file__).with_name("child.pid").write_text(str(child.pid))
        time.sleep(60)
    """)
    start = time.monotonic()
    probe = aiter_native_import(timeout=2)
    assert time.monotonic() - start < 15
    assert not probe.ok and "did not finish within 2 s" in probe.reason
    pid = int((root / "aiter" / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z":
                break  # killed, waiting for init to reap it
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"grandchild {pid} of the aiter import survived the timeout")


def test_native_import_without_aiter(monkeypatch):
    monkeypatch.setattr(envmod, "aiter_location", lambda: None)
    assert aiter_native_import() == Probe(False, "aiter is not installed")


# --- tiers ---------------------------------------------------------------------------------------------------------

def _env(**changes) -> envmod.Environment:
    base = envmod.Environment(
        python="3.11.7", executable=sys.executable, platform="Linux x86_64", torch_version="2.13.0",
        torch_build="cpu", torch_error="", devices=(), gpu_hint=None, triton_version="3.9.0",
        triton_distribution="triton", triton_gpu_backend=None, triton_interpreter=Probe(True),
        aiter_version=PINNED_AITER, aiter_location="/x/aiter", aiter_layout=LAYOUT_PINNED,
        aiter_native=Probe(False, "RuntimeError: ROCm version file not found"), jupyter={})
    return dataclasses.replace(base, **changes)


AMD = (Device(0, "AMD Instinct MI300X", "amd", "gfx942", 192.0),)
NVIDIA = (Device(0, "NVIDIA H200", "nvidia", "sm_90", 139.8),)


def _ok(tiers):
    return {name for name, probe in tiers.items() if probe.ok}


def test_tiers_cpu_only():
    tiers = tier_availability(_env())
    assert _ok(tiers) == {TIER_TRITON_INTERPRETER, TIER_EMULATED, TIER_TORCH, TIER_REFERENCE}
    assert "TRITON_INTERPRET=1" in tiers[TIER_KIT_TRITON].reason
    assert "AMD GPU" in tiers[TIER_NATIVE].reason and "cpu build" in tiers[TIER_NATIVE].reason


def test_tiers_nvidia():
    env = _env(devices=NVIDIA, torch_build="cuda 12.8", triton_gpu_backend="nvidia")
    assert _ok(tier_availability(env)) == {TIER_TRITON_GPU, TIER_TRITON_INTERPRETER, TIER_EMULATED, TIER_TORCH,
                                          TIER_KIT_TRITON, TIER_REFERENCE}


def test_tiers_rocm_native_and_unpinned_caveat():
    env = _env(devices=AMD, torch_build="rocm 6.4", triton_gpu_backend="amd", aiter_native=Probe(True))
    assert _ok(tier_availability(env)) == set(TIERS)
    assert tier_availability(env)[TIER_NATIVE].reason == ""
    other = tier_availability(dataclasses.replace(env, aiter_version="0.1.8"))[TIER_NATIVE]
    assert other.ok and "0.1.8" in other.reason and PINNED_AITER in other.reason


def test_tiers_rocm_native_import_failing():
    env = _env(devices=AMD, torch_build="rocm 6.4", aiter_native=Probe(False, "OSError: hipcc not found"))
    assert "hipcc not found" in tier_availability(env)[TIER_NATIVE].reason
    unchecked = tier_availability(dataclasses.replace(env, aiter_native=None))[TIER_NATIVE]
    assert not unchecked.ok and "not checked" in unchecked.reason


def test_tiers_moved_layout_turns_off_the_triton_tiers():
    env = _env(aiter_version="0.1.10", aiter_layout=LAYOUT_MOVED, devices=NVIDIA, triton_gpu_backend="nvidia")
    tiers = tier_availability(env)
    for tier in (TIER_TRITON_GPU, TIER_TRITON_INTERPRETER):
        assert not tiers[tier].ok
        assert "aiter.ops.triton.attention" in tiers[tier].reason and PINNED_AITER in tiers[tier].reason
    assert _ok(tiers) == {TIER_EMULATED, TIER_TORCH, TIER_KIT_TRITON, TIER_REFERENCE}  # they need no aiter


def test_tiers_without_aiter_or_triton_or_torch():
    no_aiter = tier_availability(_env(aiter_version=None, aiter_location=None, aiter_layout=None))
    assert "pip install" in no_aiter[TIER_TRITON_INTERPRETER].reason
    no_triton = tier_availability(_env(triton_version=None, triton_interpreter=Probe(False, "No module")))
    assert not no_triton[TIER_TRITON_INTERPRETER].ok and "triton" in no_triton[TIER_TRITON_INTERPRETER].reason
    no_torch = tier_availability(_env(torch_version=None, torch_build=None, torch_error="ImportError: x"))
    assert _ok(no_torch) == set() and all("torch" in p.reason for p in no_torch.values())
