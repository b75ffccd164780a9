"""Check the vLLM corpus entries' evidence in older vLLM releases, read from their wheels on the package index.

Each ``data/bugs/vllm-*.json`` entry cites, besides vLLM 0.34.0 (checked in CI's vLLM venv by
tests/test_bugs_vllm_source.py), the releases on both sides of its fix (``"at": "vllm 0.11.0"``). This script
downloads each such wheel (``pip download --no-deps --only-binary :all:``, about 0.5 GB each, nothing installed or
run), unzips the cited file, and checks that the cited line lies inside the function or class the evidence names,
printing that line. Needs the network; run by hand:

    python scripts/vllm_wheel_evidence.py [DOWNLOAD_DIR]

Exit status 0 when every citation holds, 1 otherwise.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swa_kit.measure.bugs import load_corpus  # noqa: E402
from swa_kit.vllm_versions import VLLM_VERSION  # noqa: E402

#: manylinux tags the vLLM wheels were built for, newest first (the index holds one per release)
PLATFORMS = ("manylinux_2_35_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux1_x86_64")


def wheel(version: str, folder: Path) -> Path:
    for platform in PLATFORMS:
        found = list(folder.glob(f"vllm-{version}-*.whl"))
        if found:
            return found[0]
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "--python-version", "3.12", "--platform", platform, f"vllm=={version}", "-d", str(folder)],
                       capture_output=True, check=False)
    found = list(folder.glob(f"vllm-{version}-*.whl"))
    if not found:
        raise SystemExit(f"no wheel of vLLM {version} for {', '.join(PLATFORMS)} on the package index")
    return found[0]


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="vllm-wheels-"))
    folder.mkdir(parents=True, exist_ok=True)
    failures = 0
    for entry in (e for e in load_corpus() if e.engine == "vllm"):
        for ev in entry.evidence:
            match = re.fullmatch(r"vllm (\d+\.\d+\.\d+)", ev.at)
            if not match or match.group(1) == VLLM_VERSION:
                continue
            with zipfile.ZipFile(wheel(match.group(1), folder)) as archive:
                source = archive.read(ev.file).decode()
            name = re.split(r"[ (]", ev.function)[0].split(".")[-1]
            spans = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(ast.parse(source))
                     if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name]
            ok = ev.line is not None and any(lo <= ev.line <= hi for lo, hi in spans)
            failures += not ok
            line = source.splitlines()[ev.line - 1].strip() if ev.line else ""
            print(f"{'ok  ' if ok else 'FAIL'} {entry.id} {ev.at} {ev.file}:{ev.line} in {name}: {line[:90]}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
