"""Execute the kit's notebooks headless and collect what they produced.

:func:`run_notebook` executes one notebook with nbclient on a kernel that runs *this*
interpreter (``sys.executable``), with the notebook's folder as working directory, and
talks to the kernel over Unix sockets in a private temporary folder: parallel runs (pytest
-n, two tours at once) never race for TCP ports. :func:`run_tour` runs every notebook,
writes the executed ``.ipynb``, rendered HTML, every PNG figure, the docs the notebooks link to
(:func:`localize_links`) and ``summary.json`` to an output folder, and :func:`render_summary` prints
the one-screen summary. Without ``--notebooks``, the notebooks are the ones shipped in the package.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swa_kit.errors import UsageError
from swa_kit.lessons.links import localize_links
from swa_kit.lessons.report import parse_announcements
from swa_kit.resources import notebooks_path

KERNEL_NAME = "swa-kit-python"
DEFAULT_OUT = Path("tour-out")
DEFAULT_CELL_TIMEOUT = 600.0
OK, FAILED = "ok", "failed"


def find_notebooks_dir(explicit: Path | str | None = None) -> Path:
    """``explicit`` if given, else the notebooks shipped with the kit (``notebooks/`` of a checkout)."""
    if explicit is not None:
        directory = Path(explicit)
        if not directory.is_dir():
            raise FileNotFoundError(f"notebooks folder {str(directory)!r} does not exist; pass --notebooks DIR "
                                    "pointing at the kit's notebooks/ folder")
        return directory.resolve()
    shipped = notebooks_path()
    if not shipped.is_dir():
        raise FileNotFoundError(f"the kit's notebooks are missing from {shipped}: reinstall swa_kit "
                                "(pip install --force-reinstall swa_kit) or pass --notebooks DIR")
    return shipped


def list_notebooks(directory: Path) -> list[Path]:
    """Every ``*.ipynb`` in ``directory``, in name order (NN_topic sorts as the course runs)."""
    notebooks = sorted(p for p in Path(directory).glob("*.ipynb") if not p.name.startswith("."))
    if not notebooks:
        raise FileNotFoundError(f"no .ipynb notebooks in {str(directory)!r}")
    return notebooks


def select_notebooks(notebooks: list[Path], prefixes: list[str] | None) -> list[Path]:
    """Those of ``notebooks`` whose name starts with one of ``prefixes`` (all of them when ``prefixes`` is None)."""
    if prefixes is None:
        return notebooks
    unmatched = [p for p in prefixes if not any(n.name.startswith(p) for n in notebooks)]
    if unmatched:
        raise UsageError(f"no notebook name starts with {', '.join(map(repr, unmatched))}; the notebooks: "
                         f"{', '.join(n.stem for n in notebooks)}")
    return [n for n in notebooks if n.name.startswith(tuple(prefixes))]


@contextlib.contextmanager
def kernel_environment() -> Iterator[tuple[Any, Path]]:
    """A kernel spec that launches ``sys.executable`` and a private folder for the kernel's sockets.

    Yields ``(kernel_spec_manager, socket_dir)``; both go away on exit.
    """
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory(prefix="swa-kit-kernel-") as tmp:
        spec_dir = Path(tmp) / "kernels" / KERNEL_NAME
        spec_dir.mkdir(parents=True)
        spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": f"swa_kit ({sys.executable})", "language": "python"}
        (spec_dir / "kernel.json").write_text(json.dumps(spec))
        sockets = Path(tmp) / "ipc"
        sockets.mkdir()
        yield KernelSpecManager(kernel_dirs=[str(spec_dir.parent)]), sockets


@dataclass
class NotebookRun:
    """The outcome of executing one notebook."""

    name: str
    status: str
    seconds: float
    error: str | None = None
    failed_cell: int | None = None
    paths: list[dict[str, Any]] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    executed: str | None = None
    html: str | None = None


def _error_text(error: BaseException) -> str:
    ename, evalue = getattr(error, "ename", None), getattr(error, "evalue", None)
    if ename:
        return f"{ename}: {evalue}".strip().splitlines()[0]
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def compute_paths(nb: Any) -> list[dict[str, Any]]:
    """The ``[swa_kit] path=... tier=... device=...`` announcements in ``nb``'s outputs, counted."""
    counts: dict[tuple[str, str, str], int] = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            text = output.get("text", "") if output.get("output_type") == "stream" else \
                output.get("data", {}).get("text/plain", "")
            for item in parse_announcements(text if isinstance(text, str) else "".join(text)):
                key = (item["path"], item["tier"], item["device"])
                counts[key] = counts.get(key, 0) + 1
    return [{"path": p, "tier": t, "device": d, "count": n} for (p, t, d), n in counts.items()]


def extract_figures(nb: Any, stem: str, directory: Path) -> list[Path]:
    """Write every PNG output of ``nb`` to ``directory`` as ``{stem}_cell{NN}_{k}.png``."""
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for index, cell in enumerate(nb.cells):
        k = 0
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png is None:
                continue
            target = directory / f"{stem}_cell{index:02d}_{k}.png"
            target.write_bytes(base64.b64decode(png if isinstance(png, str) else "".join(png)))
            written.append(target)
            k += 1
    return written


def run_notebook(path: Path, *, cell_timeout: float = DEFAULT_CELL_TIMEOUT,
                 on_cell: Callable[[int], object] | None = None,
                 threads: int | None = None, cwd: Path | None = None) -> tuple[Any, NotebookRun]:
    """Execute the notebook at ``path`` headless; returns the executed notebook and its run record.

    A failing cell does not raise: the run record says ``failed`` with the error, and the
    notebook holds every output up to the failure. ``on_cell(index)`` is called after each cell.
    ``threads`` caps the kernel's OpenMP/MKL threads: give 1 when other processes share the
    cores (pytest -n): oversubscribed OpenMP spin-waits made one notebook 40x slower here.
    ``cwd`` is the kernel's working directory (default: the notebook's folder; an exercise
    version written elsewhere runs in its source notebook's folder).
    """
    import nbformat
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    current: list[int] = []  # index of the cell running now, for the failure record

    def started(cell: Any, cell_index: int) -> None:
        current[:] = [cell_index]

    def executed(cell: Any, cell_index: int, execute_reply: Any) -> None:
        if on_cell is not None:
            on_cell(cell_index)

    with kernel_environment() as (spec_manager, sockets):
        manager = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=spec_manager,
                                     transport="ipc", ip=str(sockets / "kernel"))
        client = NotebookClient(
            nb, km=manager, kernel_name=KERNEL_NAME, timeout=cell_timeout, allow_errors=False,
            resources={"metadata": {"path": str(Path(cwd or path.parent).resolve())}},
            # concurrent kernels would contend for IPython's one history database
            extra_arguments=["--HistoryManager.enabled=False"],
            on_cell_start=started, on_cell_executed=executed,
        )
        start = time.perf_counter()
        try:
            limits = {} if threads is None else {name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
            client.execute(cleanup_kc=True, env={**os.environ, **limits})
        except Exception as error:  # noqa: BLE001 (the record carries it; the caller decides what a failure means)
            return nb, NotebookRun(path.stem, FAILED, round(time.perf_counter() - start, 2), _error_text(error),
                                   current[0] if current else None, compute_paths(nb))
    return nb, NotebookRun(path.stem, OK, round(time.perf_counter() - start, 2), paths=compute_paths(nb))


def _code_cells(nb: Any) -> int:
    return sum(1 for cell in nb.cells if cell.cell_type == "code")


def render_html(nb: Any) -> str:
    """The executed notebook as a standalone HTML page (nbconvert's lab template)."""
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nb)
    return body


def _notebook_link(run: NotebookRun) -> str:
    """A link to the notebook to open: an exercise version's unexecuted copy (no outputs give answers away),
    else the executed notebook."""
    from swa_kit.lessons.exercises import SUFFIX

    if run.name.endswith(SUFFIX.removesuffix(".ipynb")):
        return f"<a href='exercises/{html.escape(run.name)}.ipynb'>exercise notebook (.ipynb)</a>"
    return f"<a href='{html.escape(run.executed or '')}'>executed (.ipynb)</a>" if run.executed else ""


def _index_html(runs: list[NotebookRun]) -> str:
    rows = "\n".join(
        f"<tr><td><a href='{html.escape(r.html or '')}'>{html.escape(r.name)}</a></td><td>{_notebook_link(r)}</td>"
        f"<td>{r.status}</td><td>{r.seconds:.1f} s</td><td>{len(r.figures)}</td>"
        f"<td>{html.escape(r.error or '')}</td></tr>"
        for r in runs)
    return ("<!doctype html><meta charset='utf-8'><title>swa_kit tour</title><h1>swa_kit tour</h1>"
            "<table border=1 cellpadding=4><tr><th>notebook</th><th>open</th><th>status</th><th>time</th>"
            f"<th>figures</th><th>error</th></tr>\n{rows}\n</table>")


def with_exercise_versions(notebooks: list[Path], out: Path) -> list[tuple[Path, Path]]:
    """``(notebook to run, working directory)`` for each notebook, each followed by its exercise version
    (written to ``out/exercises/`` by :mod:`swa_kit.lessons.exercises`) when it tags solution cells."""
    from swa_kit.lessons.exercises import has_exercises, write_exercise_notebook

    listed: list[tuple[Path, Path]] = []
    for path in notebooks:
        listed.append((path, path.parent))
        if has_exercises(path):
            listed.append((write_exercise_notebook(path, out / "exercises"), path.parent))
    return listed


def run_tour(notebooks: list[Path], out: Path, *, cell_timeout: float = DEFAULT_CELL_TIMEOUT,
             progress: bool = True, exercises: bool = True) -> dict[str, Any]:
    """Execute ``notebooks`` into ``out``; returns the summary (also written to ``out/summary.json``).

    With ``exercises``, each notebook that tags solution cells is followed by its exercise version
    (``NN_topic.exercises``), executed the same way: it must run without the answers.
    """
    import nbformat
    from tqdm import tqdm

    from swa_kit.machine import detect

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    listed = with_exercise_versions(notebooks, out) if exercises else [(p, p.parent) for p in notebooks]
    parsed = [nbformat.read(p, as_version=4) for p, _ in listed]
    total_cells = sum(_code_cells(nb) for nb in parsed)
    runs: list[NotebookRun] = []
    started = time.perf_counter()
    with tqdm(total=total_cells, unit="cell", disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
        for (path, cwd), source in zip(listed, parsed):
            bar.set_description(path.stem)
            done_before = bar.n
            nb, run = run_notebook(path, cell_timeout=cell_timeout, on_cell=lambda i: bar.update(1), cwd=cwd)
            bar.update(_code_cells(source) - (bar.n - done_before))  # cells skipped after a failure
            executed = out / f"{path.stem}.ipynb"
            localize_links(nb, cwd, out)
            nbformat.write(nb, executed)
            (out / f"{path.stem}.html").write_text(render_html(nb), encoding="utf-8")
            run.executed, run.html = executed.name, f"{path.stem}.html"
            run.figures = [str(p.relative_to(out)) for p in extract_figures(nb, path.stem, out / "figures")]
            runs.append(run)
    env = detect(check_native=False)  # the summary needs no `import aiter` check
    summary = {
        "ok": all(r.status == OK for r in runs),
        "seconds": round(time.perf_counter() - started, 2),
        "out": str(out.resolve()),
        "environment": {"python": env.python, "torch": env.torch_version, "torch_build": env.torch_build,
                        "gpu_vendor": env.gpu_vendor, "devices": [d.name for d in env.devices],
                        "aiter": env.aiter_version, "triton": env.triton_version},
        "notebooks": [asdict(r) for r in runs],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "index.html").write_text(_index_html(runs), encoding="utf-8")
    return summary


def twin_path(notebook: Path) -> Path:
    """The py:percent twin of ``notebook``: same folder, same name, ``.py``."""
    return Path(notebook).with_suffix(".py")


def twin_drift(notebook: Path, twin: Path | None = None) -> list[str]:
    """How ``notebook`` and its py:percent twin differ, cell by cell (empty when in sync).

    Both files are read through jupytext and compared on cell type and source (outputs
    and metadata are not part of the twin). Sync them with ``jupytext --sync NOTEBOOK``.
    """
    import jupytext

    twin = Path(twin) if twin is not None else twin_path(notebook)
    if not twin.is_file():
        raise FileNotFoundError(f"{notebook} has no py:percent twin {twin}: create it with "
                                f"jupytext --set-formats ipynb,py:percent {notebook}")
    cells = [[(c.cell_type, c.source.strip()) for c in jupytext.read(p).cells] for p in (notebook, twin)]
    problems = [f"cell {i}: {a[0]} {a[1][:60]!r} in {Path(notebook).name} vs {b[0]} {b[1][:60]!r} in {twin.name}"
                for i, (a, b) in enumerate(zip(*cells)) if a != b]
    if len(cells[0]) != len(cells[1]):
        problems.append(f"{Path(notebook).name} has {len(cells[0])} cells, {twin.name} has {len(cells[1])}")
    return problems


def render_summary(summary: dict[str, Any]) -> str:
    """The one-screen summary of a tour."""
    runs = summary["notebooks"]
    failed = [r for r in runs if r["status"] != OK]
    env = summary["environment"]
    where = ", ".join(env["devices"]) or "CPU only"
    lines = [(f"swa-kit tour: {len(runs)} notebooks, {len(runs) - len(failed)} ok, {len(failed)} failed, "
             f"{summary['seconds']:.1f} s  (torch {env['torch']} {env['torch_build']}, {where})")]
    width = max(len(r["name"]) for r in runs)
    for r in runs:
        used = ", ".join(f"{p['path']}[{p['tier']}@{p['device']}]" for p in r["paths"]) or "-"
        lines.append(f"  {'ok    ' if r['status'] == OK else 'FAILED'}  {r['name'].ljust(width)}  "
                     f"{r['seconds']:6.1f} s  {len(r['figures']):2d} figures  paths: {used}")
        if r["error"]:
            cell = f"cell index {r['failed_cell']}: " if r["failed_cell"] is not None else ""
            lines.append(f"          {cell}{r['error']}")
    lines.append(f"Output: {summary['out']}/ (index.html, summary.json, NN_*.html, figures/)")
    return "\n".join(lines)
