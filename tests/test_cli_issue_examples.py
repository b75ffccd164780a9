"""Every example a new user reported (tracebacks, unbounded work, small slips): one line and exit 2, or the
command succeeds inside the bound it states. Run in-process, with wall time and traced peak memory measured."""

from __future__ import annotations

import io
import time
import tracemalloc
from contextlib import redirect_stderr, redirect_stdout

import pytest
import torch

from swa_kit.cli import main
from swa_kit.commands.mask import tally_estimate
from swa_kit.exit_codes import ExitCode
from swa_kit.masks import BlockTally, forward_mask

NO_GPU = not torch.cuda.is_available()


class Discard(io.TextIOBase):
    """stdout that counts lines and keeps none (the 20M-key listing is 156,250 lines)."""

    def __init__(self) -> None:
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return len(text)


def run(argv: list[str]) -> tuple[int, Discard, str, float, int]:
    """Exit status, stdout, stderr, CPU seconds (other processes on a shared machine do not count) and traced peak."""
    out, err = Discard(), io.StringIO()
    tracemalloc.start()
    start = time.process_time()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main(argv)
    except SystemExit as stop:
        code = stop.code or 0
    seconds = time.process_time() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return int(code), out, err.getvalue(), seconds, peak


REFUSED_IN_ONE_LINE = [
    # tracebacks before
    (["mask", "--mode", "decode", "--kv-len", "10", "--window", "99999999999999999999"], "99999999999999999999"),
    (["mask", "--mode", "decode", "--kv-len", "99999999999999999999", "--window", "4"], "out of range"),
    pytest.param(["probe", "--path", "reference", "--keys", "4", "--device", "cuda"], "use --device cpu",
                 marks=pytest.mark.skipif(not NO_GPU, reason="a GPU is here")),
    (["probe", "--path", "reference", "--keys", "4", "--device", "bogus"], "not a torch device"),
    (["bench", "--recorded", "/tmp"], "is a folder"),
    # unbounded work before
    (["probe", "--path", "reference", "--keys", "20000"], "--device cuda"),
    (["probe", "--path", "reference", "--keys", "100000"], "--device cuda"),
    (["probe", "--sglang-sites", "--keys", "100000"], "--device cuda"),
    (["spec-demo", "--max-new-tokens", "5000"], "--max-new-tokens"),
    # small slips
    (["mask", "--mode", "prefill", "--kv-len", "300", "--window", "4", "--block", "0"], "--block: 0"),
]


@pytest.mark.parametrize("argv, needle", REFUSED_IN_ONE_LINE)
def test_bad_or_too_big_input_is_one_line_and_exit_2(argv, needle):
    code, out, err, seconds, _ = run(argv)
    assert code == ExitCode.BAD_INPUT and err.count("\n") == 1 and "Traceback" not in err, err
    assert needle in err and seconds < 30, (err, seconds)


@pytest.mark.parametrize("kv_len", [1_048_576, 20_000_000])
def test_block_view_answers_at_any_size_inside_its_stated_bound(kv_len):
    argv = ["mask", "--mode", "prefill", "--kv-len", str(kv_len), "--window", "4096", "--block", "128"]
    bound = tally_estimate(BlockTally(forward_mask("prefill", kv_len, kv_len, 4096), 128), "text")
    code, out, err, seconds, peak = run(argv)
    assert code == 0 and "Traceback" not in err, err
    assert out.lines == 1 + kv_len // 128 + 1  # describe, one line per query block, the summary
    assert seconds <= bound.seconds and peak <= bound.bytes, (seconds, bound, peak)


def test_version_prints_the_installed_version():
    code, out, err, _, _ = run(["--version"])
    assert code == 0 and out.lines == 1


def test_fa4_none_is_read_like_none_none(capsys):
    assert main(["window", "--from", "flash_attn_4", "none", "--json"]) == 0
    none = capsys.readouterr().out
    assert main(["window", "--from", "flash_attn_4", "none,none", "--json"]) == 0
    assert capsys.readouterr().out == none


@pytest.mark.skipif(not NO_GPU, reason="a GPU is here: bench measures")
def test_bench_out_without_a_gpu_says_nothing_was_written(tmp_path):
    target = tmp_path / "out.json"
    code, _, err, _, _ = run(["bench", "--out", str(target)])
    assert code == ExitCode.CANNOT_MEASURE and "nothing written" in err and not target.exists()


def test_probe_tells_nothing_measured_from_a_real_difference():
    if NO_GPU:  # the kit's Triton kernel needs a GPU (or the interpreter): nothing measured
        assert run(["probe", "--path", "kit_triton_swa", "--keys", "4"])[0] == ExitCode.CANNOT_MEASURE
    # extend_attention_fwd takes no window: measured, and it attends more than the 4 keys meant
    assert run(["probe", "--path", "sglang_extend_attention", "--keys", "4", "--mode", "verify"])[0] == \
        ExitCode.DISAGREES


def test_counts_are_pluralised(capsys):
    assert main(["mask", "--mode", "decode", "--kv-len", "1", "--window", "1"]) == 0
    text = capsys.readouterr().out
    assert "1 query x 1 key" in text and "window 1 key" in text and "queries" not in text
    assert main(["window", "--from", "hf", "1"]) == 0
    assert "attends 1 key," in capsys.readouterr().out
