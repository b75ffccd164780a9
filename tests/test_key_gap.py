"""One key short on real transformers models (random weights, shapes from real configs, no download)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from swa_kit import budget
from swa_kit.cli import main
from swa_kit.errors import UsageError
from swa_kit.measure.key_gap import attending, compare_window, tiny_model_from_config

W = 8
MODELS = Path(__file__).resolve().parent.parent / "data" / "models"


def _configs():
    gemma3 = transformers.AutoConfig.for_model(**json.loads((MODELS / "gemma3-27b.json").read_text())["hf_config"])
    # MistralConfig's defaults are Mistral-7B-v0.1's published config (sliding_window 4096).
    return {"gemma3": gemma3, "mistral": transformers.MistralConfig()}


@pytest.fixture(scope="module", params=["gemma3", "mistral"])
def tiny(request):
    return tiny_model_from_config(_configs()[request.param], window=W, seed=1)


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids[None], use_cache=False).logits[0].double()


def test_the_shorter_window_is_a_model_built_with_it(tiny):
    """Oracle: the same weights in a model configured with W-1 from the start."""
    config = tiny.config.__class__(**{**tiny.config.to_dict(), "sliding_window": W - 1})
    other = transformers.AutoModelForCausalLM.from_config(config).eval()
    other.load_state_dict(tiny.state_dict())
    ids = torch.randint(0, tiny.config.vocab_size, (3 * W,))
    full = _logits(tiny, ids)
    with attending(tiny, W - 1):
        short = _logits(tiny, ids)
    assert tiny.config.sliding_window == W  # restored
    torch.testing.assert_close(short, _logits(other, ids))
    torch.testing.assert_close(short[: W - 1], full[: W - 1])  # these positions attend the same keys
    assert (short[W - 1:] - full[W - 1:]).abs().amax(-1).min() > 0  # every later position changes


def test_report_matches_an_independent_greedy_loop(tiny):
    ids = torch.randint(0, tiny.config.vocab_size, (2 * W + 3,))
    report = compare_window(tiny, ids, new_tokens=6)
    assert report.window == W and report.first_changed_position == W - 1
    assert report.max_kl > 0 and report.max_logit_gap > 0 and 0 <= report.argmax_agreement <= 1
    for keys, generated in ((W, report.generated_w), (W - 1, report.generated_w_minus_1)):
        seq = ids.clone()
        with attending(tiny, keys):
            for _ in range(6):  # no cache: every step recomputes the whole sequence
                seq = torch.cat([seq, _logits(tiny, seq)[-1].argmax().view(1)])
        assert seq[len(ids):].tolist() == generated
    parted = [i for i, (a, b) in enumerate(zip(report.generated_w, report.generated_w_minus_1)) if a != b]
    assert report.first_diverging_token == (parted[0] if parted else None)


def test_window_is_restored_after_an_error(tiny):
    with pytest.raises(RuntimeError, match="inside"), attending(tiny, W - 1):
        raise RuntimeError("inside")
    assert tiny.config.sliding_window == W
    assert all(getattr(m, "sliding_window", W) in (W, None) for m in tiny.modules())


def test_bad_inputs(tiny):
    with pytest.raises(UsageError, match="never fills the window"):
        compare_window(tiny, list(range(W)))
    with pytest.raises(UsageError, match="new_tokens"):
        compare_window(tiny, list(range(2 * W)), new_tokens=-1)
    tiny.train()
    try:
        with pytest.raises(UsageError, match="training mode"):
            compare_window(tiny, list(range(2 * W)))
    finally:
        tiny.eval()
    no_window = tiny_model_from_config(transformers.LlamaConfig())
    with pytest.raises(UsageError, match="sliding_window=None"):
        compare_window(no_window, list(range(2 * W)))


def test_command_on_a_saved_model(tmp_path, capsys):
    model = tiny_model_from_config(_configs()["mistral"], window=W)
    model.save_pretrained(tmp_path / "m")
    assert main(["key-gap", "--model", str(tmp_path / "m"), "--random-prompt", str(3 * W), "--new-tokens", "4",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["window"] == W and report["first_changed_position"] == W - 1 and len(report["generated_w"]) == 4
    assert main(["key-gap", "--model", str(tmp_path / "nothing"), "--random-prompt", "9"]) == 2
    assert "no config.json" in capsys.readouterr().err


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("key_gap") / "m"
    tiny_model_from_config(_configs()["mistral"], window=W).save_pretrained(path)
    return path


def test_a_long_prompt_is_refused_before_anything_is_allocated(saved, capsys):
    tracemalloc.start()
    start = time.perf_counter()
    try:
        code = main(["key-gap", "--model", str(saved), "--random-prompt", "300000"])
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "300,000 tokens" in err and "--max-memory" in err and "--random-prompt N" in err
    assert peak < 64 << 20 and time.perf_counter() - start < 20


def test_the_estimate_bounds_a_real_forward(saved):
    """Oracle: the child's peak resident memory over one forward of a 6000-token prompt, against the estimate.

    The peak is Linux's VmHWM, reset just before the forward (``clear_refs`` 5): the peak of the whole process
    (loading torch and the model) can stand above the forward's, which would hide its growth."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("the forward's own peak needs Linux's /proc/self/clear_refs")
    tokens = 6000
    script = (f"import torch, transformers\n"
              f"m = transformers.AutoModelForCausalLM.from_pretrained({str(saved)!r}).eval()\n"
              f"ids = torch.randint(0, 256, (1, {tokens}))\n"
              "def kib(field):\n"
              "    line = next(x for x in open('/proc/self/status') if x.startswith(field + ':'))\n"
              "    return int(line.split()[1])\n"
              "open('/proc/self/clear_refs', 'w').write('5')\n"
              "before = kib('VmRSS')\n"
              "with torch.no_grad():\n    m(input_ids=ids, use_cache=False).logits.double()\n"
              "print((kib('VmHWM') - before) * 1024)\n")
    grown = int(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
                .stdout.split()[-1])
    config = json.loads((saved / "config.json").read_text())
    weights = sum(f.stat().st_size for f in saved.glob("*.safetensors"))
    estimate = budget.key_gap_estimate(tokens, 0, vocab=config["vocab_size"], layers=config["num_hidden_layers"],
                                       heads=config["num_attention_heads"], kv_heads=config["num_key_value_heads"],
                                       head_dim=config["head_dim"], weight_bytes=weights)
    assert tokens * tokens < grown <= estimate.bytes, (grown, estimate)


def test_prompt_files_are_read_bounded(saved, tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, why in (("/dev/zero", "not a regular file"), (str(tmp_path), "a folder"), (str(fifo), "FIFO"),
                      (str(tmp_path / "missing"), "no such file")):
        assert main(["key-gap", "--model", str(saved), "--prompt-file", path]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--prompt-file" in err and why in err, err
