"""The launch as given, or a refusal in one line: server-argument words, --env conflicts, numbers out of range."""

from __future__ import annotations

import pytest

from swa_kit.cli import main
from swa_kit.launch.inputs import parse_env_pairs, parse_server_args

MODEL = ["--model", "gemma4-31b"]


@pytest.mark.parametrize("argv,message", [
    (["--server-args", "--attention-backend aiter stray --page-size 16"],
     "'stray' after --attention-backend is not a flag"),
    (["--server-args", "banana --attention-backend aiter"], "'banana' is not a flag"),
    (["--env", "SGLANG_USE_AITER_UNIFIED_ATTN=1", "--env", "SGLANG_USE_AITER_UNIFIED_ATTN=0"],
     "--env SGLANG_USE_AITER_UNIFIED_ATTN is given twice ('1' and '0')"),
    (["--gpu-memory-gib", "inf"], "GPU memory inf GiB: a finite size"),
    (["--gpu-memory-gib", "nan"], "GPU memory nan GiB: a finite size"),
    (["--weights-gib", "inf"], "--weights-gib inf: the weights' size in GiB, finite"),
    (["--server-args", "server_args=ServerArgs(model_path='m', page_size=1e999)"],
     "page_size=inf: SGLang reads it as int"),
    (["--server-args", "server_args=ServerArgs(model_path='m', **{'page_size': 16})"], "**{...} argument"),
    (["--server-args", "ServerArgs(page_size=[1, 2])"], "page_size=[1, 2]: SGLang reads it as int"),
    (["--server-args", "ServerArgs(max_total_tokens=10**40)"], "SGLang reads it as int"),
    (["--server-args", "ServerArgs(max_total_tokens=99999999999999)"], "out of range"),
    (["--server-args", "ServerArgs(page_size=" + "[" * 5000 + "]" * 5000 + ")"],
     "cannot read the ServerArgs(...) line"),
    (["--server-args", "--page-size"], "--page-size needs a value"),
    (["--server-args", "/dev/zero"], "'/dev/zero' is not a regular file"),
    (["--server-args", "--page-size 4 " + "y" * 5000], "(4,802 more characters) after --page-size is not a flag"),
])
def test_an_audit_of_another_launch_is_refused_in_one_line(capsys, argv, message):
    assert main(["audit", *MODEL, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert len(err) < 800  # an input is quoted at most 200 characters


def test_a_lone_flag_in_quotes_is_the_server_args_value(capsys):
    """``--server-args "--disable-hybrid-swa-memory"`` used to fail with "expected one argument"."""
    code = main(["audit", *MODEL, "--server-args", "--disable-hybrid-swa-memory", "--json"])
    assert code in (0, 1), capsys.readouterr().err
    import json
    report = json.loads(capsys.readouterr().out)
    switch = next(r for r in report["decisions"] if r["decision"] == "hybrid_swa_memory")
    assert switch["value"] is False
    with pytest.raises(SystemExit) as stop:  # a word that is no option of the audit is still refused
        main(["audit", *MODEL, "--bogus-option"])
    assert stop.value.code == 2
    assert "unrecognized arguments: --bogus-option" in capsys.readouterr().err


def test_launch_words_and_repeated_equal_values_are_kept():
    args = parse_server_args("python3 -m sglang.launch_server --model-path m --page-size 16 --page-size 16")
    assert args.page_size == 16 and args.model_path == "m"
    assert parse_server_args("sglang serve --page-size 4").page_size == 4
    assert parse_env_pairs(["SGLANG_USE_AITER_UNIFIED_ATTN=1"] * 2) == {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}
