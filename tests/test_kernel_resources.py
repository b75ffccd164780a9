"""benchmarks/kernel_resources.py refuses a bad ``--set`` before it compiles anything, naming the way out."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")


@pytest.fixture(scope="module")
def kernel_resources():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_resources.py"
    spec = importlib.util.spec_from_file_location("kernel_resources", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("item", "message"), [
    ("edge_prefetch", "give NAME=INT, e.g. edge_prefetch=1"),
    ("edge_prefetch=yes", "give NAME=INT"),
    ("edge_prefetc=1", "unknown launch override(s) ['edge_prefetc']; known: ["),
    ("whole_wave=2", "launch override whole_wave=2: give an int in 0..1"),
    ("block_n=24", "block_n=24: a key tile needs a power of two >= 16"),
])
def test_a_bad_override_is_refused_by_name(kernel_resources, capsys, item, message) -> None:
    with pytest.raises(SystemExit) as stopped:
        kernel_resources.main(["--set", item])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_every_compile_time_argument_of_the_kernel_is_passed(kernel_resources) -> None:
    """The resources are those of the kernel a plan launches: each of its constexprs set, none left to run time."""
    from swa_kit.attention import kit_triton as kt

    for dim, group, q_len, page, split in ((128, 4, 1, 16, False), (64, 8, 8, 1, True), (256, 2, 8, 16, True)):
        config = kt.launch_config(dim, group, q_len, page_size=page, latency_bound=split)
        constants = kernel_resources.kernel_constants(config, dim, group, q_len, page, split)
        assert set(constants) == {p.name for p in kt._swa_attend_kernel.params if p.is_constexpr}
        assert constants["EDGE_SPLIT"] == (split and q_len > 1)  # a latency-bound verify's edge program
    verify = kt.launch_config(128, 4, 8)  # the edge tile walked as the plan walks it: with two buffers, or asked for
    assert kernel_resources.kernel_constants(verify, 128, 4, 8, 16, False, deep=True)["EDGE_IN_WALK"]
    assert not kernel_resources.kernel_constants(verify, 128, 4, 8, 16, False)["EDGE_IN_WALK"]
    assert kernel_resources.kernel_constants(verify, 128, 4, 8, 16, False, overridden={"edge_in_walk"})["EDGE_IN_WALK"]
