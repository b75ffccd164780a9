"""Wall time of the ``swa-kit`` command's light answers, each in a fresh interpreter (median of 5).

    python benchmarks/cli_startup.py [--repeat 5]

Runs ``python -m swa_kit`` (the same ``main`` as the ``swa-kit`` script) from this checkout. For scale it also times
a bare interpreter and the old way of building the parser, which imported every command module (and so torch).
Target: ``--help`` and ``window --from hf 1024`` well under a second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = [
    ("python -c pass (interpreter only)", ["-c", "pass"]),
    ("swa-kit --help", ["-m", "swa_kit", "--help"]),
    ("swa-kit window --from hf 1024", ["-m", "swa_kit", "window", "--from", "hf", "1024"]),
    ("import every command (the parser before lazy loading)",
     ["-c", "from swa_kit.cli import command_modules; command_modules()"]),
]


def wall_seconds(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per case; the median is printed")
    repeat = parser.parse_args().repeat
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    print(f"python {sys.version.split()[0]}, median of {repeat} runs, {os.cpu_count()} CPUs")
    for label, args in CASES:
        times = [wall_seconds(args, env) for _ in range(repeat)]
        print(f"{statistics.median(times):7.3f} s  {label}  (min {min(times):.3f}, max {max(times):.3f})")


if __name__ == "__main__":
    main()
