"""The tour on small synthetic notebooks, the announce/parse convention, and ``swa-kit lab``'s command."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from hypothesis import given
from hypothesis import strategies as st

from swa_kit.cli import main
from swa_kit.commands import lab
from swa_kit.lessons import tour as tour_module
from swa_kit.lessons.report import announce, announce_all, format_announcement, parse_announcements
from swa_kit.lessons.links import localize_links
from swa_kit.lessons.tour import (
    compute_paths,
    find_notebooks_dir,
    list_notebooks,
    render_summary,
    run_notebook,
    run_tour,
    select_notebooks,
    twin_drift,
)
from swa_kit.resources import notebooks_path

GOOD = [
    "import os, sys\nprint(sys.executable)\nprint(os.getcwd())",
    "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(2, 2))\nax.imshow([[0, 1], [1, 0]])\nplt.show()",
    ("from swa_kit.lessons.report import announce\n"
    "announce(path='reference', tier='reference', device='cpu')\n"
    "announce({'path': 'aiter_triton_unified', 'tier': 'aiter-triton-interpreter', 'device': 'cpu'})\n"
    "announce(path='reference', tier='reference', device='cpu')"),
]
BAD = ["x = 1", "raise ValueError('boom from the notebook')", "y = 2"]


def _write(path: Path, sources: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# title")] + [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def tour(tmp_path_factory):
    notebooks = tmp_path_factory.mktemp("notebooks")
    _write(notebooks / "01_good.ipynb", GOOD)
    _write(notebooks / "02_bad.ipynb", BAD)
    out = tmp_path_factory.mktemp("tour") / "out"
    summary = run_tour(list_notebooks(notebooks), out, cell_timeout=120, progress=False)
    return SimpleNamespace(notebooks=notebooks, out=out, summary=summary)


def test_summary_records_status_time_and_error(tour):
    runs = {r["name"]: r for r in tour.summary["notebooks"]}
    assert list(runs) == ["01_good", "02_bad"]
    assert not tour.summary["ok"]
    good, bad = runs["01_good"], runs["02_bad"]
    assert good["status"] == "ok" and good["error"] is None and good["seconds"] > 0
    assert bad["status"] == "failed" and bad["error"] == "ValueError: boom from the notebook"
    assert bad["failed_cell"] == 2  # markdown title is cell 0
    assert json.loads((tour.out / "summary.json").read_text()) == tour.summary


def test_compute_paths_are_collected_and_counted(tour):
    good = tour.summary["notebooks"][0]
    assert good["paths"] == [
        {"path": "reference", "tier": "reference", "device": "cpu", "count": 2},
        {"path": "aiter_triton_unified", "tier": "aiter-triton-interpreter", "device": "cpu", "count": 1},
    ]
    assert tour.summary["notebooks"][1]["paths"] == []


def test_kernel_runs_this_interpreter_in_the_notebook_folder(tour):
    nb = nbformat.read(tour.out / "01_good.ipynb", as_version=4)
    printed = nb.cells[1].outputs[0].text.splitlines()
    assert os.path.realpath(printed[0]) == os.path.realpath(sys.executable)
    assert os.path.realpath(printed[1]) == os.path.realpath(tour.notebooks)


def test_figures_are_real_pngs(tour):
    figures = tour.summary["notebooks"][0]["figures"]
    assert figures == ["figures/01_good_cell02_0.png"]
    data = (tour.out / figures[0]).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 50 and height > 50


def test_html_and_executed_notebooks_are_written(tour):
    for name in ("01_good", "02_bad"):
        assert (tour.out / f"{name}.ipynb").is_file()
        assert "<html" in (tour.out / f"{name}.html").read_text()
    assert "[swa_kit] path=reference" in (tour.out / "01_good.html").read_text()
    assert "boom from the notebook" in (tour.out / "02_bad.html").read_text()
    assert "01_good.html" in (tour.out / "index.html").read_text()


def test_rendered_summary_fits_a_screen(tour):
    text = render_summary(tour.summary)
    lines = text.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 160 for line in lines)
    assert "1 ok, 1 failed" in lines[0]
    assert any("FAILED" in line and "02_bad" in line for line in lines)
    assert any("ValueError: boom from the notebook" in line for line in lines)
    assert "aiter_triton_unified[aiter-triton-interpreter@cpu]" in text


def test_tour_command_exit_codes(tour, tmp_path, capsys):
    assert main(["tour", "--notebooks", str(tour.notebooks), "--out", str(tmp_path / "a"), "--no-progress"]) == 1
    assert "1 ok, 1 failed" in capsys.readouterr().out
    only_good = tmp_path / "good"
    only_good.mkdir()
    _write(only_good / "01_fine.ipynb", ["print(1 + 1)"])
    _write(only_good / "02_not_chosen.ipynb", ["raise ValueError('not chosen, so never run')"])
    assert main(["tour", "--notebooks", str(only_good), "--out", str(tmp_path / "b"), "--no-progress",
                 "--json", "--only", "01"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["ok"] is True and printed == json.loads((tmp_path / "b" / "summary.json").read_text())
    assert [r["name"] for r in printed["notebooks"]] == ["01_fine"]
    assert main(["tour", "--notebooks", str(only_good), "--out", str(tmp_path / "c"), "--only", "01",
                 "--only", "9"]) == 2
    assert capsys.readouterr().err == ("swa-kit tour: error: no notebook name starts with '9'; the notebooks: "
                                       "01_fine, 02_not_chosen\n")
    assert not (tmp_path / "c").exists()


def test_select_notebooks_by_name_prefix():
    notebooks = [Path(f"/n/{name}.ipynb") for name in ("00_story", "01_masks", "04_aiter", "04b_extra")]
    assert select_notebooks(notebooks, None) == notebooks
    assert select_notebooks(notebooks, ["04"]) == notebooks[2:]
    assert select_notebooks(notebooks, ["04_", "00"]) == [notebooks[0], notebooks[2]]  # in course order
    with pytest.raises(ValueError, match="no notebook name starts with '05', '1'; the notebooks: 00_story, "):
        select_notebooks(notebooks, ["05", "01", "1"])


# --- the announce convention ------------------------------------------------------------------------------------

WORD = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20)


@given(WORD, WORD, WORD)
def test_announcement_round_trip(path, tier, device):
    line = format_announcement(path=path, tier=tier, device=device)
    noise = f"before\n{line}\n[swa_kit] something else\nafter"
    assert parse_announcements(noise) == [{"path": path, "tier": tier, "device": device}]


def test_announce_reads_results_and_overrides(capsys):
    result = SimpleNamespace(path="torch_sdpa", tier="torch", device="cuda:0", out=None)
    assert announce(result) == "[swa_kit] path=torch_sdpa tier=torch device=cuda:0"
    assert announce(result, device="cpu").endswith("device=cpu")
    assert capsys.readouterr().out.splitlines() == ["[swa_kit] path=torch_sdpa tier=torch device=cuda:0",
                                                    "[swa_kit] path=torch_sdpa tier=torch device=cpu"]


def test_announce_all_names_each_path_once_in_first_seen_order(capsys):
    results = [{"path": "b", "tier": "t", "device": "cpu"}, {"path": "a", "tier": "t", "device": "cpu"},
               {"path": "b", "tier": "t", "device": "cpu"}, {"path": "b", "tier": "t", "device": "cuda:0"}]
    assert announce_all(results) is None
    assert [d["path"] + "@" + d["device"] for d in parse_announcements(capsys.readouterr().out)] == \
        ["b@cpu", "a@cpu", "b@cuda:0"]
    with pytest.raises(ValueError, match="tier"):
        announce_all([{"path": "a", "device": "cpu"}])


@pytest.mark.parametrize("kwargs", [{}, {"path": "a b", "tier": "t", "device": "cpu"},
                                    {"path": "a", "tier": "", "device": "cpu"}, {"path": "a", "tier": "t"}])
def test_announce_rejects_unnamed_or_spaced_values(kwargs):
    with pytest.raises(ValueError, match="announce"):
        format_announcement(**kwargs)


def test_compute_paths_reads_stream_outputs_only_where_announced():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x\n[swa_kit] path=p tier=t device=d\n"),
                    nbformat.v4.new_output("execute_result", data={"text/plain": "'[swa_kit] path=q tier=t device=d'"},
                                           execution_count=1)]
    nb.cells = [cell]
    assert compute_paths(nb) == [{"path": "p", "tier": "t", "device": "d", "count": 1}]


# --- finding notebooks, and lab -------------------------------------------------------------------------------

def test_find_notebooks_dir(tmp_path, monkeypatch):
    assert find_notebooks_dir() == notebooks_path() == (Path(__file__).resolve().parents[1] / "notebooks")
    monkeypatch.chdir(tmp_path)  # the shipped notebooks, wherever the command runs
    assert find_notebooks_dir() == notebooks_path()
    assert find_notebooks_dir(tmp_path) == tmp_path.resolve()
    with pytest.raises(FileNotFoundError, match="--notebooks"):
        find_notebooks_dir(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no .ipynb"):
        list_notebooks(tmp_path)
    monkeypatch.setattr(tour_module, "notebooks_path", lambda: tmp_path / "gone")
    with pytest.raises(FileNotFoundError, match="missing from .*gone: reinstall swa_kit .* --notebooks DIR"):
        find_notebooks_dir()


LINKS = ("[g](../docs/g.md#term), [b](02_b.ipynb), [w](https://example.org/docs/g.md), [top](#top), "
         "[gone](../docs/missing.md), [far](../../outside.md), [self](../notebooks/01_a.ipynb)")


def test_localize_links_copies_what_leaves_the_folder_and_points_there(tmp_path):
    kit = tmp_path / "kit"
    (kit / "notebooks").mkdir(parents=True)
    (kit / "docs").mkdir()
    (kit / "docs" / "g.md").write_text("# g\n<a id=\"term\"></a>\n")
    (tmp_path / "outside.md").write_text("not the kit's")
    source = _write(kit / "notebooks" / "01_a.ipynb", ['print("[g](../docs/g.md)")'])
    (kit / "notebooks" / "02_b.ipynb").write_text("{}")
    nb = nbformat.read(source, as_version=4)
    nb.cells[0].source = LINKS
    out = tmp_path / "out"
    assert localize_links(nb, kit / "notebooks", out) == [out / "docs" / "g.md"]
    assert (out / "docs" / "g.md").read_text() == (kit / "docs" / "g.md").read_text()
    assert nb.cells[0].source == LINKS.replace("(../docs/g.md#term)", "(docs/g.md#term)")  # the rest as written
    assert nb.cells[1].source == 'print("[g](../docs/g.md)")'  # code is not markdown


def test_every_link_of_the_shipped_notebooks_resolves_from_the_tour_output(tmp_path):
    import re

    notebooks = list_notebooks(find_notebooks_dir())
    written = {p.name for p in notebooks}  # the tour writes each executed notebook beside the others
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        localize_links(nb, path.parent, tmp_path)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        targets = [t.partition("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]
        broken = [t for t in targets if t and not ((tmp_path / t).is_file() or t in written)]
        assert targets and not broken, f"{path.name} links to {broken} from the tour's output"


def test_lab_dry_run_prints_the_command(tmp_path, capsys):
    assert main(["lab", "--notebooks", str(tmp_path), "--dry-run", "--port", "8899", "--no-browser"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"cd {tmp_path.resolve()} && JUPYTER_PATH=")
    assert f"{sys.executable} -m jupyterlab" in out[0]
    assert f"--ServerApp.root_dir={tmp_path.resolve()}" in out[0]
    assert "--ServerApp.port=8899" in out[0] and "--no-browser" in out[0]
    assert ("--allow-root" in out[0]) == (os.geteuid() == 0)  # Jupyter refuses root without it


def test_lab_kernel_spec_wins_on_jupyter_path(tmp_path, monkeypatch):
    from jupyter_client.kernelspec import KernelSpecManager

    data_dir = tmp_path / "data"
    lab.write_kernel_spec(data_dir)
    monkeypatch.setenv("JUPYTER_PATH", str(data_dir))
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.argv[0] == sys.executable and spec.argv[1:3] == ["-m", "ipykernel_launcher"]


# --- the twin drift check (used by test_notebooks) -----------------------------------------------------------

def test_twin_drift_detects_a_changed_cell(tmp_path):
    import jupytext

    notebook = _write(tmp_path / "01_pair.ipynb", ["x = 1", "print(x)"])
    twin = tmp_path / "01_pair.py"
    jupytext.write(nbformat.read(notebook, as_version=4), twin, fmt="py:percent")
    assert twin_drift(notebook) == []
    twin.write_text(twin.read_text().replace("print(x)", "print(x + 1)"))
    drift = twin_drift(notebook)
    assert len(drift) == 1 and "cell 2" in drift[0] and "print(x + 1)" in drift[0]
    twin.write_text(twin.read_text() + "\n# %%\nextra = 3\n")
    assert any("has 3 cells" in d and "has 4" in d for d in twin_drift(notebook))


def test_twin_drift_without_a_twin(tmp_path):
    notebook = _write(tmp_path / "02_alone.ipynb", ["x = 1"])
    with pytest.raises(FileNotFoundError, match="jupytext --set-formats"):
        twin_drift(notebook)


def test_thread_cap_reaches_the_kernel(tmp_path):
    notebook = _write(tmp_path / "01_threads.ipynb", [("import os, torch\nprint(os.environ.get('OMP_NUM_THREADS'), "
                                                      "torch.get_num_threads())")])
    nb, run = run_notebook(notebook, cell_timeout=120, threads=1)
    assert run.status == "ok", run.error
    assert nb.cells[1].outputs[0].text.split() == ["1", "1"]


# --- exercise versions ----------------------------------------------------------------------------------------

def test_tour_runs_the_exercise_version_after_its_notebook(tmp_path):
    import jupytext

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    nb = jupytext.reads('# %% [markdown]\n# [the doc](../docs/a.md)\n\n# %%\nimport os\nprint(os.getcwd())\n\n'
                        '# %% tags=["solution"]\nprint("the answer")\n', fmt="py:percent")
    nbformat.write(nb, notebooks / "01_tagged.ipynb")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# a\n")
    _write(notebooks / "02_plain.ipynb", ["print(2)"])
    summary = run_tour(list_notebooks(notebooks), tmp_path / "out", cell_timeout=120, progress=False)
    assert [r["name"] for r in summary["notebooks"]] == ["01_tagged", "01_tagged.exercises", "02_plain"]
    assert summary["ok"]
    executed = nbformat.read(tmp_path / "out" / "01_tagged.exercises.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    assert "the answer" not in printed  # the solution cell is gone
    assert os.path.realpath(printed.split()[0]) == os.path.realpath(notebooks)  # runs in the source's folder
    for name in ("01_tagged", "01_tagged.exercises"):  # the doc it links to is copied, and the link follows
        assert nbformat.read(tmp_path / "out" / f"{name}.ipynb", as_version=4).cells[0].source == "[the doc](docs/a.md)"
        assert 'href="docs/a.md"' in (tmp_path / "out" / f"{name}.html").read_text()
    assert (tmp_path / "out" / "docs" / "a.md").read_text() == "# a\n"
    index = (tmp_path / "out" / "index.html").read_text()
    assert "href='exercises/01_tagged.exercises.ipynb'" in index and "href='01_tagged.ipynb'" in index
    assert (tmp_path / "out" / "exercises" / "docs" / "a.md").is_file()  # its own link works where it is written


@pytest.mark.notebook
def test_story_notebook_exercise_version_runs(tmp_path):
    from swa_kit.lessons.exercises import write_exercise_notebook

    source = find_notebooks_dir() / "00_the_story.ipynb"
    nb, run = run_notebook(write_exercise_notebook(source, tmp_path), cell_timeout=300, threads=1)  # in tmp_path
    assert run.status == "ok", f"cell index {run.failed_cell}: {run.error}"
    printed = "".join(o.get("text", "") or str(o.get("data", {}).get("text/plain", ""))
                      for c in nb.cells for o in c.get("outputs", []))
    assert printed.count("not answered yet") == 2 and "0.1: right" not in printed


#: Notebooks 01-07: their exercise versions run, and every check in them says "not answered yet".
LESSON_CHECKS = {"01_window_conventions_and_masks": 3, "02_kv_pools_full_vs_swa": 2, "03_draft_target_pool_sharing": 2,
                 "04_aiter_dispatch_and_guards": 3, "05_kernels_and_performance": 2, "06_debugging_a_launch": 2,
                 "07_one_model_two_engines": 2}


@pytest.mark.notebook
@pytest.mark.parametrize("name", list(LESSON_CHECKS))
def test_lesson_exercise_versions_run(tmp_path, name):
    from swa_kit.lessons.exercises import write_exercise_notebook

    source = find_notebooks_dir() / f"{name}.ipynb"
    nb, run = run_notebook(write_exercise_notebook(source, tmp_path), cell_timeout=300, threads=1)  # in tmp_path
    assert run.status == "ok", f"cell index {run.failed_cell}: {run.error}"
    printed = "".join(o.get("text", "") or str(o.get("data", {}).get("text/plain", ""))
                      for c in nb.cells for o in c.get("outputs", []))
    assert printed.count("not answered yet") == LESSON_CHECKS[name] and ": right." not in printed
