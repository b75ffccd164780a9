"""Time of the ``swa-kit`` command's answers, each in a fresh interpreter, against the targets of issue 34 item 7.

    python benchmarks/cli_startup.py [--repeat 5]

Runs ``python -m swa_kit`` (the same ``main`` as the ``swa-kit`` script) from this checkout: every subcommand's
``--help`` (target 0.6 s), ``swa-kit models`` (1 s) and ``swa-kit audit`` on bundled models (1.5 s; SGLang's own
code is not read). A config the kit has no record of is read once through transformers (and torch), then from the
user's cache: both are timed, the first without a target. Each run gets an empty cache of its own
(``SWA_KIT_CACHE_DIR``), except the cached read's, which gets the one its first read filled.

Per case: the best wall time of the runs (the figure judged against the target: on a shared machine the other
runs wait for a core), their median, and the best CPU time (user + system) the run used. A bare interpreter is
timed for scale.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from swa_kit.commands import COMMANDS  # noqa: E402  (the checkout's own command table)
from swa_kit.models.configs import load_model  # noqa: E402

HELP_TARGET, MODELS_TARGET, AUDIT_TARGET = 0.6, 1.0, 1.5


@dataclass(frozen=True)
class Case:
    label: str
    args: tuple[str, ...]
    target: float | None
    shared_cache: bool = False  # run in the cache the case before it filled


def cases(config: Path) -> list[Case]:
    own = ("-m", "swa_kit", "audit", "--hf-config", str(config))
    return [
        Case("python -c pass (interpreter only)", ("-c", "pass"), None),
        Case("swa-kit --help", ("-m", "swa_kit", "--help"), HELP_TARGET),
        *(Case(f"swa-kit {name} --help", ("-m", "swa_kit", name, "--help"), HELP_TARGET) for name in COMMANDS),
        Case("swa-kit models", ("-m", "swa_kit", "models"), MODELS_TARGET),
        *(Case(f"swa-kit audit --model {name}", ("-m", "swa_kit", "audit", "--model", name), AUDIT_TARGET)
          for name in ("gemma4-31b", "gpt-oss-20b")),
        Case("swa-kit audit --hf-config (a new config: first read, through transformers)", own, None),
        Case("swa-kit audit --hf-config (the same config again: from the user's cache)", own, AUDIT_TARGET, True),
    ]


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float  # user + system of the child


def timed(args: tuple[str, ...], env: dict[str, str]) -> Timing:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # audit exits 1 when it has findings: an answer, not a failure; anything above 1 is
    done = subprocess.run([sys.executable, *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode > 1:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}")
    return Timing(wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (default 5)")
    repeat = parser.parse_args().repeat
    if repeat < 1:
        raise SystemExit(f"--repeat {repeat}: give 1 or more runs per case")
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    print(f"python {sys.version.split()[0]}, best and median of {repeat} runs, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'best':>7}  {'median':>7}  {'cpu':>6}  case")
    missed = 0
    with tempfile.TemporaryDirectory(prefix="swa-kit-startup-") as scratch:
        config = Path(scratch) / "my-model" / "config.json"
        config.parent.mkdir()
        # a real config the kit ships no record of: a bundled model's, under another name
        config.write_text(json.dumps({**load_model("gpt-oss-20b").hf_config, "_name_or_path": "me/my-model"}))
        for number, case in enumerate(cases(config)):
            times = []
            for run in range(repeat):
                cache = Path(scratch) / "cache" / (f"{number - 1}.0" if case.shared_cache else f"{number}.{run}")
                times.append(timed(case.args, {**os.environ, "PYTHONPATH": path, "SWA_KIT_CACHE_DIR": str(cache)}))
            best, cpu = min(t.wall for t in times), min(t.cpu for t in times)
            verdict = ""
            if case.target is not None:
                verdict = f"  target {case.target} s: {'met' if best <= case.target else 'MISSED'}"
                missed += best > case.target
            print(f"{best:7.3f}  {statistics.median(t.wall for t in times):7.3f}  {cpu:6.3f}  {case.label}{verdict}")
    print("every target met" if not missed else f"{missed} target(s) missed")


if __name__ == "__main__":
    main()
