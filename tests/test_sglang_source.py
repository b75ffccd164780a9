"""SGLang's own lines beside the lessons (swa_kit.lessons.sglang_source).

Without SGLang the lessons must say where to look; with it (the ``sglang``-marked tests, run in a venv that holds
SGLang) they must show the real functions, and the file and line the kit records for SGLang 0.5.23 must be where
the installed source has them.
"""

from __future__ import annotations

import importlib.util
import os
import random
import textwrap
from pathlib import Path

import pytest

from swa_kit.errors import WindowConventionError
from swa_kit.lessons import sglang_source as src
from swa_kit.sglang_versions import SGLANG_VERSION


def _no_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(src.importlib.util, "find_spec", lambda name, *a: None if name == "sglang" else real(name, *a))


@pytest.mark.parametrize("name", list(src.SPOTS))
def test_without_sglang_says_where_to_look(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    _no_sglang(monkeypatch)
    view = src.sglang_source(name)
    spot = src.SPOTS[name]
    assert view.text is None and view.version is None
    shown = str(view)
    assert "not installed" in shown
    assert f"sglang/{spot.file}" in shown and f"SGLang {SGLANG_VERSION}" in shown
    assert f"line {spot.line}" in shown and spot.qualname in shown


def test_unknown_spot_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="resolve_swa_kv_pool"):
        src.sglang_source("resolve")


def _fake_sglang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """A package called sglang whose aiter_backend.py holds ``body``: the finder must read it, not import it."""
    package = tmp_path / "sglang"
    backend = package / "srt/layers/attention/aiter_backend.py"
    backend.parent.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('the kit must not import sglang')\n")
    backend.write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_reads_the_installed_file_without_importing_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    padding = random.Random(7).randint(3, 40)
    _fake_sglang(tmp_path, monkeypatch, "import gpu_only_module\n" + "\n" * padding + textwrap.dedent("""\
        class AiterAttnBackend:
            @staticmethod
            def _resolve_swa_kv_pool(model_runner):
                return None

            def forward_decode(self, layer):
                window_size = (-1, -1)
                if layer.sliding_window_size > -1:
                    window_size = (layer.sliding_window_size - 1, 0)
                return window_size
        """))
    view = src.sglang_source("resolve_swa_kv_pool")
    assert view.line == padding + 4 and view.file.endswith("aiter_backend.py")
    assert view.text == "def _resolve_swa_kv_pool(model_runner):\n    return None"
    site = src.sglang_source("unified_decode_call_site")
    assert site.line == padding + 9
    assert site.text is not None
    assert site.text.splitlines()[1].strip() == "window_size = (layer.sliding_window_size - 1, 0)"
    missing = src.sglang_source("reject_paged_decode_sliding_window")
    assert missing.text is None and "has changed" in str(missing) and "line 3675" in str(missing)
    triton = src.sglang_source("triton_window_buffer")  # no triton_backend.py in the fake
    assert triton.text is None and "has no" in str(triton)


@pytest.mark.parametrize("keys", [2, 5, 1024] + random.Random(3).sample(range(3, 9000), 5))
def test_unified_site_fix(keys: int) -> None:
    fix = src.unified_site_fix(keys)
    # aiter's unified kernel keeps q - k < 1 + left: count the keys a query at the end of a long context sees
    q = 10 * keys
    seen = {left: sum(1 for k in range(q + 1) if q - k < 1 + left) for left in (fix.passed[0], fix.fixed[0])}
    assert fix.sws == keys - 1 and fix.passed == (keys - 2, 0) and fix.fixed == (keys - 1, 0)
    assert (fix.passed_keys, fix.fixed_keys) == (seen[fix.passed[0]], seen[fix.fixed[0]]) == (keys - 1, keys)
    assert "(sws, 0)" in str(fix) and f"attends {keys} keys" in str(fix)


@pytest.mark.parametrize("bad", [0, 1, -3, 2.5, "1024", None])
def test_unified_site_fix_refuses_bad_windows(bad: object) -> None:
    with pytest.raises((WindowConventionError, ValueError), match=str(bad) if bad != "1024" else "1024"):
        src.unified_site_fix(bad)  # type: ignore[arg-type]


# --- against SGLang's own source ---------------------------------------------------------------------------------

# What each spot must contain in SGLang 0.5.23 (facts the lessons explain, read from the source).
_EXPECTED = {
    "resolve_swa_kv_pool": ("def _resolve_swa_kv_pool(model_runner)", "is_frozen_kv_mtp()", "get_kvcache()"),
    "reject_paged_decode_sliding_window": ("def _reject_paged_decode_sliding_window(layer)", "raise ValueError",
                                           "SGLANG_USE_AITER_UNIFIED_ATTN=1"),
    "unified_decode_call_site": ("layer.sliding_window_size - 1, 0", "swa_page_table"),
    "triton_window_buffer": ("def update_sliding_window_buffer(", "torch.minimum", "sliding_window_size"),
}


@pytest.mark.sglang
@pytest.mark.parametrize("name", list(src.SPOTS))
def test_shows_sglang_and_the_recorded_line_holds(name: str) -> None:
    if importlib.util.find_spec("sglang") is None:
        if os.environ.get("SWA_KIT_REQUIRE_SGLANG") == "1":
            pytest.fail("SWA_KIT_REQUIRE_SGLANG=1 but sglang is not installed", pytrace=False)
        pytest.skip("SGLang is not installed")
    view = src.sglang_source(name)
    assert view.text is not None, str(view)
    assert view.version == SGLANG_VERSION, f"the recorded lines are for SGLang {SGLANG_VERSION}, not {view.version}"
    assert view.line == src.SPOTS[name].line
    for fact in _EXPECTED[name]:
        assert fact in view.text
    # the line printed beside the text is the installed file's own line
    first = Path(view.file).read_text(encoding="utf-8").splitlines()[view.line - 1].strip()
    assert first == view.text.splitlines()[0].strip()
