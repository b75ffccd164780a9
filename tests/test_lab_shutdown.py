"""``swa-kit lab`` stops cleanly: a SIGINT or SIGTERM sent to it (to it alone, as ``kill`` does) stops
JupyterLab and its kernel, and nothing is left serving the port or running."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from swa_kit.commands.lab import STOP_GRACE_S

pytestmark = pytest.mark.slow

TOKEN = "swa-kit-lab-shutdown-test"
START_TIMEOUT_S = 120.0  # JupyterLab and an ipykernel starting on a busy 2-core machine


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def api(port: int, path: str, method: str = "GET", body: dict | None = None) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


def wait_until(condition, what: str, lab: subprocess.Popen, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert lab.poll() is None, f"swa-kit lab exited with {lab.returncode} while waiting for {what}"
        with contextlib.suppress(OSError):  # the server is not answering yet
            if condition():
                return
        time.sleep(0.5)
    raise AssertionError(f"swa-kit lab: no {what} after {timeout:.0f} s")


def listening_kernels(pid: int) -> list[psutil.Process]:
    """The kernels under ``pid`` that have opened their ZeroMQ ports (started, not just spawned)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        # a child that exited meanwhile, or a zombie not yet reaped (psutil.ZombieProcess), is no kernel
        with contextlib.suppress(psutil.NoSuchProcess):
            if "ipykernel_launcher" in child.cmdline() and any(c.status == psutil.CONN_LISTEN
                                                               for c in child.net_connections()):
                found.append(child)
    return found


def still_running(processes: list[psutil.Process]) -> list[str]:
    """Those of ``processes`` still alive; a zombie (exited, not yet reaped by init) holds no port and runs nothing."""
    left = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):  # gone between the two calls: not running
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{process.pid} {' '.join(process.cmdline())}")
    return left


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_lab_and_its_kernel(tmp_path: Path, signum: int) -> None:
    port = free_loopback_port()
    env = {**os.environ, "JUPYTER_TOKEN": TOKEN, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_DATA_DIR": str(tmp_path / "data")}
    log = tmp_path / "lab.log"  # a file, not a pipe: a server left behind would hold a pipe open
    with log.open("wb") as out:
        lab = subprocess.Popen([sys.executable, "-m", "swa_kit", "lab", "--notebooks", str(tmp_path),
                                "--port", str(port), "--no-browser"], env=env, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)  # so only the signal this test sends reaches it
    family: list[psutil.Process] = []
    try:
        wait_until(lambda: "version" in api(port, ""), "answer on the port", lab)
        api(port, "/kernels", "POST", {"name": "python3"})
        wait_until(lambda: listening_kernels(lab.pid), "kernel listening on its ports", lab)
        family = psutil.Process(lab.pid).children(recursive=True)
        assert any("jupyterlab" in " ".join(p.cmdline()) for p in family), [p.cmdline() for p in family]

        lab.send_signal(signum)
        lab.wait(timeout=3 * STOP_GRACE_S)
        name = signal.Signals(signum).name
        # It handled the signal (a process killed by it has a negative status), and nothing is left.
        assert lab.returncode >= 0, f"swa-kit lab died of {name}: {log.read_text(errors='replace')[-2000:]}"
        assert not port_open(port), f"port {port} still serves after {name}"
        assert still_running(family) == [], f"left running after {name}"
    finally:  # whatever failed, leave nothing behind
        if lab.poll() is None:
            family += [*psutil.Process(lab.pid).children(recursive=True), psutil.Process(lab.pid)]
        for process in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        lab.wait()
