"""``swa-kit lab``: JupyterLab on the kit's notebooks, with a kernel that runs this interpreter.

SIGINT and SIGTERM sent to ``swa-kit lab`` reach JupyterLab, which shuts its kernels down; the command
waits for both and kills whatever is still there after a grace period, so nothing keeps serving the port.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from swa_kit.commands._extras import NOTEBOOK_MODULES, require
from swa_kit.lessons.tour import find_notebooks_dir, list_notebooks

if TYPE_CHECKING:
    import psutil

NAME = "lab"
HELP = "start JupyterLab on notebooks/ with a kernel that runs this Python (--dry-run prints the command)"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Seconds JupyterLab gets to stop after a signal: its kernel manager waits up to 5 s
#: (``shutdown_wait_time``) for a kernel to stop before killing it, plus the server's own cleanup.
STOP_GRACE_S = 10.0
#: Where ``--exercises`` writes the exercise versions, inside the notebooks folder (git-ignored in the kit's tree).
EXERCISES_DIR = "exercises"


def kernel_data_dir() -> Path:
    """A Jupyter data folder, one per interpreter, whose ``python3`` kernel runs ``sys.executable``.

    It goes first on ``JUPYTER_PATH``, so the notebooks' ``python3`` kernel is this interpreter
    even when the user has another ``python3`` kernel spec installed.
    """
    digest = hashlib.sha1(sys.executable.encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"swa-kit-jupyter-{digest}"


def write_kernel_spec(data_dir: Path) -> Path:
    spec_dir = data_dir / "kernels" / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (swa_kit)", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    return spec_dir


def lab_command(notebooks: Path, port: int | None, browser: bool) -> list[str]:
    command = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={notebooks}"]
    if port is not None:
        command.append(f"--ServerApp.port={port}")
    if not browser:
        command.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # containers and workshop VMs often run as root; Jupyter refuses without it
    return command


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"port {text!r} is not a TCP port (1-65535)")
    return int(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--notebooks", type=Path, default=None, metavar="DIR",
                        help="folder to open (default: the notebooks shipped with the kit)")
    parser.add_argument("--port", type=_port, default=None, help="server port (default: JupyterLab's choice)")
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser")
    parser.add_argument("--exercises", action="store_true",
                        help="write the exercise versions (answers stripped) into NOTEBOOKS/exercises and open those")
    parser.add_argument("--dry-run", action="store_true", help="print the command and its environment, start nothing")


def run(args: argparse.Namespace) -> int:
    if (stopped := require(NAME, NOTEBOOK_MODULES)) is not None:
        return stopped
    notebooks = find_notebooks_dir(args.notebooks)
    if args.exercises:
        notebooks = open_exercises(notebooks, dry_run=args.dry_run)
    data_dir = kernel_data_dir()
    command = lab_command(notebooks, args.port, browser=not args.no_browser)
    jupyter_path = os.pathsep.join(p for p in (str(data_dir), os.environ.get("JUPYTER_PATH", "")) if p)
    if args.dry_run:
        print(f"cd {shlex.quote(str(notebooks))} && JUPYTER_PATH={shlex.quote(jupyter_path)} {shlex.join(command)}")
        print(f"(kernel spec: {data_dir / 'kernels' / 'python3' / 'kernel.json'} -> {sys.executable})")
        return 0
    write_kernel_spec(data_dir)
    return serve(command, cwd=notebooks, env={**os.environ, "JUPYTER_PATH": jupyter_path})


def open_exercises(notebooks: Path, dry_run: bool) -> Path:
    """``notebooks/exercises``, where the exercise version of every notebook that tags ``solution`` cells (read
    from its py:percent twin when there is one) is written afresh; a dry run only says where."""
    from swa_kit.errors import UsageError
    from swa_kit.lessons.exercises import has_exercises, write_exercise_notebook

    target = notebooks / EXERCISES_DIR
    if dry_run:
        print(f"(would write the exercise versions into {target})")
        return target
    sources = [nb.with_suffix(".py") if nb.with_suffix(".py").is_file() else nb for nb in list_notebooks(notebooks)]
    try:
        written = [write_exercise_notebook(source, target) for source in sources if has_exercises(source)]
    except PermissionError as error:
        raise UsageError(f"cannot write the exercise versions into {str(target)!r} ({error.strerror}): copy the "
                         "notebooks somewhere writable and pass --notebooks DIR") from None
    print(f"wrote {len(written)} exercise versions into {target}")
    return target


class _StopRequested(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stop(signum: int, _frame: object) -> None:
    raise _StopRequested(signum)


def serve(command: list[str], *, cwd: Path, env: dict[str, str], grace_s: float = STOP_GRACE_S) -> int:
    """Run the JupyterLab ``command`` until it exits or this process gets SIGINT or SIGTERM.

    JupyterLab runs in a session of its own, with no terminal on stdin: a signal reaches it only
    through this process (a terminal's Ctrl-C would otherwise hit both, and Jupyter's SIGINT handler
    would ask a question on a terminal it cannot read). Returns JupyterLab's exit status, or
    128 + the signal number when it had to be killed.
    """
    server = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    previous = {s: signal.signal(s, _raise_stop) for s in STOP_SIGNALS}
    try:
        try:
            code = server.wait()
        except _StopRequested as stop:
            code = stop_server(server, stop.signum, grace_s)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code if code >= 0 else 128 - code


def stop_server(server: subprocess.Popen, signum: int, grace_s: float) -> int:
    """Pass ``signum`` to JupyterLab's process group, wait for it and its kernels, then kill what is left.

    Kernels run in sessions of their own (jupyter_client starts them so), so they are found as the
    server's descendants before it exits; a second signal stops the waiting at once.
    """
    import psutil  # the [notebooks] extra's, like JupyterLab; run() checked it is here

    family = _descendants(server.pid)
    _signal_group(server.pid, signum)
    with contextlib.suppress(subprocess.TimeoutExpired, _StopRequested):  # then the kill below
        server.wait(timeout=grace_s)
        psutil.wait_procs(family, timeout=grace_s)
    for s in STOP_SIGNALS:  # from here on, nothing is left to wait for but the kill
        signal.signal(s, signal.SIG_IGN)
    _signal_group(server.pid, signal.SIGKILL)
    for process in family:
        with contextlib.suppress(psutil.NoSuchProcess):  # it exited on its own meanwhile
            process.kill()
    psutil.wait_procs(family, timeout=grace_s)
    return server.wait()


def _descendants(pid: int) -> list[psutil.Process]:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group has already exited
        os.killpg(pgid, signum)
