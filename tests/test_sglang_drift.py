"""The drift check: every SWA surface of the installed SGLang is named in the kit's one table, modelled or not.

It lists, from SGLang's own code, every ServerArgs field whose name or help mentions swa, window, sliding, hybrid,
speculative, draft, page or memory; every subclass of BaseSWAKVPool; every registered attention backend; every
speculative algorithm (``swa_kit.launch.sglang_surface``). A name that ``swa_kit.launch.surface.SURFACE`` neither
models nor refuses nor sets aside fails it. CI runs it in its SGLang venv with ``SWA_KIT_REQUIRE_SGLANG=1``, where
an SGLang that cannot be read fails too.
"""

from __future__ import annotations

import pytest
from sglang_support import require_sglang

from swa_kit.launch import sglang_surface
from swa_kit.launch.surface import SURFACE, unaccounted

pytestmark = pytest.mark.sglang
require_sglang("sglang.srt.server_args", "sglang.srt.arg_groups.arg_utils",
               "sglang.srt.layers.attention.attention_registry", "sglang.srt.speculative.spec_info")


@pytest.fixture(scope="module")
def found() -> dict[str, list[str]]:
    return sglang_surface.read_surface()


def test_every_swa_surface_of_sglang_is_named(found):
    missing = unaccounted(found)
    assert not missing, ("SGLang surfaces the kit neither models nor refuses nor sets aside (name each in "
                         f"swa_kit/launch/surface.py): {missing}")


def test_the_table_names_nothing_sglang_lacks(found):
    """A name that left SGLang must leave the table too, or the table reads an older release."""
    present = {(kind, name) for kind, names in found.items() for name in names}
    assert sorted(set(SURFACE) - present) == []


def test_the_check_catches_a_planted_unknown(found, monkeypatch):
    planted = {kind: [*names, f"planted_{kind}_swa"] for kind, names in found.items()}
    assert unaccounted(planted) == sorted((kind, f"planted_{kind}_swa") for kind in found)
    # and through SGLang's own reading: a new field whose help mentions the window is caught
    real = sglang_surface.server_args
    monkeypatch.setattr(sglang_surface, "server_args", lambda: [*real(), "speculative_new_window_knob"])
    assert unaccounted(sglang_surface.read_surface()) == [("server_arg", "speculative_new_window_knob")]


def test_a_pool_subclassed_at_one_remove_is_found(tmp_path):
    (tmp_path / "a.py").write_text("class BaseSWAKVPool(KVCache):\n    pass\nclass Mid(mod.BaseSWAKVPool):\n    pass\n")
    (tmp_path / "b.py").write_text("class Leaf(Other, Mid):\n    pass\nclass Unrelated(KVCache):\n    pass\n")
    assert sglang_surface.swa_pools(tmp_path) == ["Leaf", "Mid"]
