"""``swa-kit doctor``: findings on this machine and on synthetic ones, text and JSON output, exit codes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from swa_kit.measure import doctor
from swa_kit.cli import main
from swa_kit.measure.doctor import ERROR, MISSING, NOTE, OK, diagnose, exit_code, render_text
from swa_kit.machine import (
    JUPYTER_PACKAGES,
    LAYOUT_MOVED,
    LAYOUT_PINNED,
    PINNED_AITER,
    TIERS,
    Device,
    Environment,
    Probe,
    detect,
)


def _env(**changes) -> Environment:
    base = Environment(
        python="3.11.7", executable=sys.executable, platform="Linux x86_64", torch_version="2.13.0",
        torch_build="cpu", torch_error="", devices=(), gpu_hint=None, triton_version="3.9.0",
        triton_distribution="triton", triton_gpu_backend=None, triton_interpreter=Probe(True),
        aiter_version=PINNED_AITER, aiter_location="/nonexistent/aiter", aiter_layout=LAYOUT_PINNED,
        aiter_native=Probe(False, "RuntimeError: ROCm version file not found"),
        jupyter={name: "1.0" for name in JUPYTER_PACKAGES})
    return dataclasses.replace(base, **changes)


def _by_name(findings):
    return {f.name: f for f in findings}


@pytest.fixture(autouse=True)
def no_loader(monkeypatch, request):
    """Synthetic environments are judged by files: the real loader would read this machine's aiter."""
    if "env" not in request.fixturenames:
        monkeypatch.setattr(doctor, "_LOADER", "swa_kit._no_such_loader_module")


@pytest.fixture(scope="module")
def env():
    return detect()


def test_this_machine_has_no_errors_and_exits_zero(env):
    findings = diagnose(env)
    names = {f.name for f in findings}
    assert {"python", "torch", "devices", "triton", "aiter", "aiter native import", "aiter Triton kernels"} <= names
    assert {f"tier {t}" for t in TIERS} <= names and set(JUPYTER_PACKAGES) <= names
    assert exit_code(findings) == 0 and not [f for f in findings if f.status == ERROR]
    for f in findings:
        if f.status in (MISSING, ERROR):
            assert f.reason, f"{f.name} is {f.status} without a reason"


def test_cpu_only_machine_is_fine():
    findings = diagnose(_env())
    found = _by_name(findings)
    assert exit_code(findings) == 0
    assert found["devices"].status == NOTE and "CPU only" in found["devices"].impact
    assert found["triton"].status == NOTE and "interpreter" in found["triton"].found
    assert found["aiter native import"].status == MISSING
    assert found["aiter native import"].reason == "RuntimeError: ROCm version file not found"
    assert "emulation" in found["aiter native import"].impact
    assert found["aiter Triton kernels"].status == OK
    assert found["tier aiter-native"].status == MISSING and found["tier reference"].status == OK


def test_missing_torch_is_an_error():
    findings = diagnose(_env(torch_version=None, torch_build=None, torch_error="ModuleNotFoundError: torch"))
    assert _by_name(findings)["torch"].status == ERROR
    assert exit_code(findings) == 1
    assert "XX" in render_text(findings)


def test_moved_aiter_layout_is_explained():
    findings = _by_name(diagnose(_env(aiter_version="0.1.10", aiter_layout=LAYOUT_MOVED)))
    aiter = findings["aiter"]
    assert aiter.status == MISSING
    assert "aiter.ops.triton.attention" in aiter.reason and "0.1.10" in aiter.reason and PINNED_AITER in aiter.reason
    assert findings["aiter Triton kernels"].status == MISSING
    assert findings["tier aiter-triton-interpreter"].status == MISSING


def test_other_aiter_version_with_pinned_layout_is_a_caveat():
    found = _by_name(diagnose(_env(aiter_version="0.1.8")))
    assert found["aiter"].status == NOTE and PINNED_AITER in found["aiter"].reason


def test_no_aiter():
    found = _by_name(diagnose(_env(aiter_version=None, aiter_location=None, aiter_layout=None,
                                   aiter_native=Probe(False, "aiter is not installed"))))
    assert found["aiter"].status == MISSING and "[aiter]" in found["aiter"].impact
    assert found["aiter Triton kernels"].status == MISSING


def test_gpu_hidden_by_a_cpu_torch():
    found = _by_name(diagnose(_env(gpu_hint="nvidia")))["devices"]
    assert found.status == MISSING and "NVIDIA" in found.reason and "CUDA build" in found.impact


def test_rocm_gpu_with_native_aiter():
    env = _env(torch_build="rocm 6.4", devices=(Device(0, "AMD Instinct MI300X", "amd", "gfx942", 192.0),),
               triton_gpu_backend="amd", triton_distribution="pytorch-triton-rocm", aiter_native=Probe(True))
    found = _by_name(diagnose(env))
    assert found["devices"].status == OK and "gfx942" in found["devices"].found
    assert all(found[f"tier {t}"].status == OK for t in TIERS)


def test_rocm_with_failing_import_does_not_call_the_loader(monkeypatch):
    monkeypatch.setattr(doctor, "_LOADER", "swa_kit.attention.aiter.loader")  # would import aiter in-process
    env = _env(torch_build="rocm 6.4", aiter_native=Probe(False, "timed out"))
    found = _by_name(diagnose(env))["aiter Triton kernels"]
    assert found.status == OK and "not loaded" in found.reason


def test_missing_jupyter_package():
    found = _by_name(diagnose(_env(jupyter={**{n: "1.0" for n in JUPYTER_PACKAGES}, "nbclient": None})))
    assert found["nbclient"].status == MISSING and "tour" in found["nbclient"].impact


def test_text_report_explains_missing_pieces():
    text = render_text(diagnose(_env()))
    lines = text.splitlines()
    native = next(i for i, line in enumerate(lines) if "aiter native import" in line)
    assert "why:" in lines[native + 1] and "ROCm version file not found" in lines[native + 1]
    assert "means:" in lines[native + 2]
    assert lines[-1].startswith("Compute tiers usable here:") and "reference" in lines[-1]


def test_json_output(env, capsys):
    assert main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 0
    assert data["environment"]["torch_version"] == env.torch_version
    assert {f["name"] for f in data["findings"]} >= {"torch", "aiter native import"}
    assert all(set(f) == {"name", "status", "found", "reason", "impact"} for f in data["findings"])


def test_doctor_as_a_command_is_quiet_and_exits_zero(env):
    result = subprocess.run([sys.executable, "-m", "swa_kit", "doctor"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Compute tiers usable here:" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert "hipconfig" not in result.stderr and "rocminfo" not in result.stderr
