"""``swa-kit lab``: JupyterLab on the kit's notebooks, with a kernel that runs this interpreter."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from swa_kit.tour import find_notebooks_dir

NAME = "lab"
HELP = "start JupyterLab on notebooks/ with a kernel that runs this Python (--dry-run prints the command)"


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
                        help="folder to open (default: notebooks/ of the kit's checkout)")
    parser.add_argument("--port", type=_port, default=None, help="server port (default: JupyterLab's choice)")
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser")
    parser.add_argument("--dry-run", action="store_true", help="print the command and its environment, start nothing")


def run(args: argparse.Namespace) -> int:
    notebooks = find_notebooks_dir(args.notebooks)
    data_dir = kernel_data_dir()
    command = lab_command(notebooks, args.port, browser=not args.no_browser)
    jupyter_path = os.pathsep.join(p for p in (str(data_dir), os.environ.get("JUPYTER_PATH", "")) if p)
    if args.dry_run:
        print(f"cd {shlex.quote(str(notebooks))} && JUPYTER_PATH={shlex.quote(jupyter_path)} {shlex.join(command)}")
        print(f"(kernel spec: {data_dir / 'kernels' / 'python3' / 'kernel.json'} -> {sys.executable})")
        return 0
    write_kernel_spec(data_dir)
    return subprocess.call(command, cwd=notebooks, env={**os.environ, "JUPYTER_PATH": jupyter_path})
