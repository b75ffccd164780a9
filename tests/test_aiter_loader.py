"""Loading aiter's Triton kernel files without its ROCm-bound package __init__."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swa_kit.attention.aiter import loader
from swa_kit.errors import PathUnavailableError

needs_wheel = pytest.mark.skipif(loader.aiter_version() is None, reason="amd-aiter is not installed")


@needs_wheel
def test_version_and_package_dir_from_metadata():
    assert loader.aiter_version() == loader.PINNED_VERSION
    root = loader.aiter_package_dir()
    assert (root / loader.KERNEL_FILES["unified_attention"]).is_file()


@needs_wheel
def test_both_copies_load_and_differ_in_mode():
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    interp = loader.load_unified_attention_kernels(interpreted=True)
    gpu = loader.load_unified_attention_kernels(interpreted=False)
    assert interp is not gpu and interp is loader.load_unified_attention_kernels(interpreted=True)
    for name in ("kernel_unified_attention_2d", "kernel_unified_attention_3d", "reduce_segments"):
        assert isinstance(getattr(interp, name), InterpretedFunction)
        assert isinstance(getattr(gpu, name), JITFunction)
    assert "unified_attention.py" in interp.__swa_kit_source__
    pa = loader.load_kernel_module("pa_decode", interpreted=True)
    assert hasattr(pa, "_paged_attn_decode_v1_wo_dot_kernel")


@needs_wheel
def test_placeholders_off_rocm_and_the_status():
    ok, reason = loader.aiter_triton_status()
    assert ok, reason
    assert loader.PINNED_VERSION in reason and "interpreter" in reason
    native_ok, native_reason = loader.native_aiter_status()
    if torch.version.hip is None:
        assert not native_ok and native_reason.startswith("needs ROCm")
        placeholder = sys.modules["aiter"]
        assert placeholder.__swa_kit_placeholder__
        with pytest.raises(AttributeError, match="placeholder"):
            placeholder.paged_attention_ragged  # noqa: B018 - the skipped __init__ would define it


def test_unknown_kernel_module():
    with pytest.raises(PathUnavailableError, match="unknown aiter kernel module"):
        loader.load_kernel_module("flash_attn", interpreted=True)


def test_moved_layout_is_refused(monkeypatch):
    monkeypatch.setattr(loader, "aiter_version", lambda: "0.1.10")
    with pytest.raises(PathUnavailableError, match=r"aiter\.ops\.triton\.attention.*0\.1\.7\.post2\.dev18"):
        loader._check_layout()
    monkeypatch.setattr(loader, "aiter_version", lambda: None)
    with pytest.raises(PathUnavailableError, match="pip install"):
        loader._check_layout()


def test_release_parsing():
    assert loader._release("0.1.7.post2.dev18") == (0, 1, 7)
    assert loader._release("0.1.10") >= loader.MOVED_IN
    assert loader._release("0.1.9+rocm6.4") < loader.MOVED_IN


@needs_wheel
def test_interpreter_knob_is_restored_and_stdlib_swap_is_undone():
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    before = os.environ.get("TRITON_INTERPRET")
    loader._CACHE.pop(("pa_decode", True), None)
    loader.load_kernel_module("pa_decode", interpreted=True)
    assert os.environ.get("TRITON_INTERPRET") == before
    with loader.interpreted_stdlib():
        assert not isinstance(tl.zeros, JITFunction)
    assert isinstance(tl.zeros, JITFunction)


@needs_wheel
def test_a_compile_after_an_interpreted_launch_sees_triton_language_as_it_was(tmp_path):
    """An interpreted launch of aiter's kernel (the CPU tier), then a compile of the kit's kernel for sm_90 in the same
    process. Triton's interpreter left triton.language's builtins patched, and that compile failed in the
    interpreter's builder. A fresh process and an empty Triton cache, so that the compile cannot come from a cache."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from swa_kit.attention.aiter import triton_kernels; "
        "ok, why = triton_kernels.interpreter_status(); print(ok, why); "
        "from benchmarks import kernel_resources; "
        "print(kernel_resources.compile_facts(128, 4, 8, 16, False)['walk_loop_sass'] > 0)"
    )
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path)}
    child = subprocess.run([sys.executable, "-c", code, root], capture_output=True, text=True, timeout=600, env=env,
                           check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    launched, compiled = child.stdout.strip().splitlines()
    if not launched.startswith("True"):
        pytest.skip(f"this Triton's interpreter does not run aiter's kernel: {launched}")
    assert compiled == "True"


@needs_wheel
def test_fresh_process_never_runs_aiter_init():
    """aiter's __init__ shells out to hipconfig; a fresh process must load kernels without it."""
    code = (
        "import sys; from swa_kit.attention.aiter import loader as L; "
        "L.load_unified_attention_kernels(interpreted=True); "
        "print(getattr(sys.modules['aiter'], '__swa_kit_placeholder__', False), 'aiter.jit' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    expected = "True False" if torch.version.hip is None else None
    if expected:
        assert out.stdout.strip() == expected
