"""The oracle's parts that run without SGLang: the ast reader, the platform facts, the refusal without SGLang."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

from swa_kit.launch.inputs import PLATFORMS, Launch
from swa_kit.launch.sglang_oracle import PLATFORM_FACTS, decide_with_sglang, window_expressions
from swa_kit.errors import SGLangUnavailableError

SOURCE = textwrap.dedent('''
    class AiterAttnBackend:
        def forward_decode(self, layer):
            window_size = (-1, -1)
            if layer.sliding_window_size is not None and layer.sliding_window_size > -1:
                window_size = (layer.sliding_window_size - 1, 0)
            other = (layer.head_dim, 0)

        def forward_extend(self, layer):
            if layer.sliding_window_size > -1:
                window_size = (layer.sliding_window_size, -1)
''')


def test_window_expressions_reads_the_assignments_built_from_sliding_window_size(tmp_path):
    path = tmp_path / "aiter_backend.py"
    path.write_text(SOURCE)
    found = [(e.method, e.target, e.expression, e.line) for e in window_expressions(path)]
    assert found == [("forward_decode", "window_size", "(layer.sliding_window_size - 1, 0)", 6),
                     ("forward_extend", "window_size", "(layer.sliding_window_size, -1)", 11)]


def test_every_platform_the_kit_names_has_sglang_platform_facts():
    assert set(PLATFORM_FACTS) == set(PLATFORMS)
    hip = {name for name, facts in PLATFORM_FACTS.items() if facts["is_hip"]}
    assert hip == {"rocm-gfx942", "rocm-gfx950"}
    assert PLATFORM_FACTS["cuda-sm100"]["is_sm100"] and not PLATFORM_FACTS["cuda-sm90"]["is_sm100"]
    assert not any(PLATFORM_FACTS["cpu"].values())


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
def test_without_sglang_the_oracle_says_how_to_get_it():
    with pytest.raises(SGLangUnavailableError, match="pip install --no-deps sglang==0.5.23"):
        decide_with_sglang(Launch.from_inputs(model="gemma4-31b"))
