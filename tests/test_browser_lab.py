"""JupyterLab in a real browser: notebook 01's mask explorer redraws when its window slider moves.

A JupyterLab server (token off, private config/settings/runtime folders, a temp copy of
notebooks/, the kit's kernel via ``swa_kit.commands.lab``) is driven by Playwright through
Debian's Chromium (/usr/bin/chromium; Playwright's own browser download is never used). The
test runs all cells, moves the explorer's window slider one step and checks that the
explorer's own figure and summary change. A screenshot is kept under ``$SWA_KIT_ARTIFACTS``
(default ``tests/artifacts/``), also on failure, for whoever reads CI's output.

CI (``CI=true``) fails when Chromium or Playwright is missing; elsewhere the test is skipped
with the reason. Every wait is bounded; the server is stopped in the fixture's teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from swa_kit.commands.lab import write_kernel_spec
from swa_kit.lessons.tour import find_notebooks_dir

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
NOTEBOOK = "01_window_conventions_and_masks.ipynb"
ARTIFACTS = Path(os.environ.get("SWA_KIT_ARTIFACTS", Path(__file__).parent / "artifacts"))
SERVER_START_S = 45.0
RUN_ALL_S = 60_000  # ms: kernel start plus every cell of notebook 01 on a 2-core CPU
STEP_MS = 20_000
LAB_SETTINGS = {
    # No news toast, and no request to the news feed or for updates.
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    # Every cell in the DOM: JupyterLab 4 otherwise detaches cells scrolled out of view.
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


def _require(ok: bool, reason: str) -> None:
    """Skip with ``reason`` on a workstation; fail in CI, where the browser test must run."""
    if ok:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}; .ci/run installs Debian's chromium (apt-get install chromium)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"


@pytest.fixture
def playwright_api():
    """Playwright's sync API, once Chromium and the package are known to be here (checked before any server)."""
    _require(CHROMIUM.exists(), f"{CHROMIUM} is missing (Debian: apt-get install chromium)")
    try:
        from playwright import sync_api
    except ImportError:
        _require(False, "the playwright package is missing (pip install -e '.[dev]')")
    return sync_api


def _start_session(url: str, notebook: str) -> None:
    """Start the notebook's kernel through the REST API, so the page attaches to it (no kernel dialog)."""
    body = json.dumps({"path": notebook, "name": notebook, "type": "notebook", "kernel": {"name": "python3"}})
    request = urllib.request.Request(f"{url}/api/sessions", data=body.encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 201, f"POST /api/sessions answered {reply.status}"


@pytest.fixture
def lab_server(playwright_api, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A JupyterLab server on a free localhost port over a temp copy of notebooks/.

    Yields ``(base URL, display name of the kit's kernel)``.
    """
    root = tmp_path / "notebooks"
    shutil.copytree(find_notebooks_dir(), root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    data_dir = tmp_path / "jupyter-data"
    # The notebooks' python3 kernel runs this interpreter, as under `swa-kit lab`.
    kernel_name = json.loads((write_kernel_spec(data_dir) / "kernel.json").read_text())["display_name"]
    for name, value in LAB_SETTINGS.items():
        path = tmp_path / "lab-settings" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    env = {**os.environ, "JUPYTER_PATH": str(data_dir), "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "lab-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "lab-workspaces"), "MPLBACKEND": "Agg"}
    port = _free_port()
    log_path = tmp_path / "jupyterlab.log"
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--IdentityProvider.token=",
               "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={root}",
               "--ServerApp.allow_root=True"]
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with {server.returncode} before serving:\n{_log_tail(log_path)}")
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer on {url} within {SERVER_START_S:.0f} s:\n"
                            f"{_log_tail(log_path)}")
            time.sleep(0.25)
        yield url, kernel_name
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)


def _dismiss_popups(page) -> None:
    """Close any dialog (e.g. a kernel chooser: accept its default) and any toast notification."""
    for _ in range(3):
        dialog = page.locator(".jp-Dialog")
        if not dialog.count():
            break
        accept = dialog.locator("button.jp-mod-accept")
        if accept.count():
            accept.first.click(timeout=5_000)
        else:
            page.keyboard.press("Escape")
        page.wait_for_timeout(300)
    for close in page.locator(".Toastify__toast .jp-toast-button, .Toastify__close-button").all():
        if close.is_visible():
            close.click(timeout=5_000)


def _wait_all_cells_ran(page, timeout_s: float) -> None:
    """Until every code cell has an execution count; fail at once, with its text, on a cell's traceback."""
    pending = page.locator(".jp-CodeCell .jp-InputPrompt", has_text=re.compile(r"\[[ *]\]"))
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                          has_text="Traceback")
    deadline = time.monotonic() + timeout_s
    while pending.count():
        if errors.count():
            pytest.fail(f"a cell of {NOTEBOOK} failed in JupyterLab:\n{errors.first.inner_text()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{pending.count()} cells of {NOTEBOOK} had not run after {timeout_s:.0f} s")
        page.wait_for_timeout(250)


def test_mask_explorer_slider_redraws_figure(playwright_api, lab_server: tuple[str, str]) -> None:
    expect, sync_playwright = playwright_api.expect, playwright_api.sync_playwright
    url, kernel_name = lab_server
    _start_session(url, NOTEBOOK)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=30_000)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(STEP_MS)
        expect.set_options(timeout=STEP_MS)
        try:
            page.goto(f"{url}/lab/tree/{NOTEBOOK}?reset", timeout=30_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=30_000)
            # The page has attached to the session's kernel (the kit's) once the status bar names it, idle.
            expect(page.locator(".jp-StatusBar-Widget", has_text=f"{kernel_name} | Idle")).to_have_count(
                1, timeout=30_000)
            _dismiss_popups(page)

            page.locator(".lm-MenuBar-item .lm-MenuBar-itemLabel:text-is('Run')").click()
            page.locator("li[data-command='runmenu:run-all']").click()

            # The explorer: the widget box holding the "window (keys)" slider. Scoped to it, so no other
            # figure of the notebook can stand in for the explorer's.
            explorer = page.locator(".widget-vbox", has=page.locator(".widget-slider", has_text="window (keys)"))
            expect(explorer).to_have_count(1, timeout=RUN_ALL_S)
            explorer.scroll_into_view_if_needed()
            figure = explorer.locator("img.widget-image")
            summary = explorer.locator(".widget-html")
            expect(figure).to_have_count(1)
            expect(summary).to_contain_text("window 4 keys")
            # Let every cell finish (the explorer is not the last one) so the slider's redraw
            # is not queued behind the rest of the notebook.
            _wait_all_cells_ran(page, RUN_ALL_S / 1000)
            _dismiss_popups(page)
            before = figure.get_attribute("src")
            assert before, "the explorer's figure has no image source"
            explorer.screenshot(path=str(ARTIFACTS / "browser_lab_01_explorer_before.png"))

            slider = explorer.locator(".widget-slider", has_text="window (keys)")
            slider.locator(".noUi-handle").focus()
            page.keyboard.press("ArrowRight")
            expect(slider.locator(".widget-readout")).to_have_text("5")
            expect(summary).to_contain_text("window 5 keys")
            expect(figure).to_have_count(1)
            expect(figure).not_to_have_attribute("src", before)
            after = figure.get_attribute("src")
            assert after and after != before

            explorer.screenshot(path=str(ARTIFACTS / "browser_lab_01_explorer_after.png"))
            page.screenshot(path=str(ARTIFACTS / "browser_lab_01.png"))
        except BaseException:
            with contextlib.suppress(Exception):  # never hide the failure behind a failed screenshot
                page.screenshot(path=str(ARTIFACTS / "browser_lab_01_failure.png"))
            raise
        finally:
            browser.close()

