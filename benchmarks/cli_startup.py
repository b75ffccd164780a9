"""Wall time of the ``swa-kit`` command's answers, each in a fresh interpreter (median of 5), against targets.

    python benchmarks/cli_startup.py [--repeat 5]

Runs ``python -m swa_kit`` (the same ``main`` as the ``swa-kit`` script) from this checkout: every subcommand's
``--help`` (target 0.6 s), ``swa-kit models`` (1 s) and ``swa-kit audit`` on a bundled model (1.5 s, reading
SGLang's code only with ``--check-with-sglang``, which is not timed). A bare interpreter is timed for scale. On a
shared machine the figures move with the load: read them beside the interpreter's.
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
sys.path.insert(0, str(ROOT))
from swa_kit.commands import COMMANDS  # noqa: E402  (the checkout's own command table)

HELP_TARGET, MODELS_TARGET, AUDIT_TARGET = 0.6, 1.0, 1.5
CASES: list[tuple[str, list[str], float | None]] = [
    ("python -c pass (interpreter only)", ["-c", "pass"], None),
    ("swa-kit --help", ["-m", "swa_kit", "--help"], HELP_TARGET),
    *((f"swa-kit {name} --help", ["-m", "swa_kit", name, "--help"], HELP_TARGET) for name in COMMANDS),
    ("swa-kit models", ["-m", "swa_kit", "models"], MODELS_TARGET),
    ("swa-kit audit --model gpt-oss-20b", ["-m", "swa_kit", "audit", "--model", "gpt-oss-20b"], AUDIT_TARGET),
]


def wall_seconds(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    # audit exits 1 when it has findings: an answer, not a failure; anything above 1 is
    done = subprocess.run([sys.executable, *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    if done.returncode > 1:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per case; the median is printed")
    repeat = parser.parse_args().repeat
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    print(f"python {sys.version.split()[0]}, median of {repeat} runs, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    for label, args, target in CASES:
        times = [wall_seconds(args, env) for _ in range(repeat)]
        median = statistics.median(times)
        verdict = "" if target is None else f"  target {target} s: {'met' if median <= target else 'MISSED'}"
        print(f"{median:7.3f} s  {label}  (min {min(times):.3f}, max {max(times):.3f}){verdict}")


if __name__ == "__main__":
    main()
