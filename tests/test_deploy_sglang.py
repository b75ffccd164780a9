"""The kit's bundled SGLang 0.5.23 tables (deploy.decide) against SGLang's own decisions on many launches.

Each launch is decided twice: by :func:`swa_kit.launch.decide.decide` (the kit's reading of SGLang) and by
:func:`swa_kit.launch.sglang_oracle.decide_with_sglang` (SGLang's own argument resolution, model config and
pool configurator, on the platform the launch names). Every decision the oracle read from SGLang must agree.
"""

from __future__ import annotations

import itertools
import random

import pytest
from sglang_support import require_sglang

require_sglang("sglang.srt.server_args", "sglang.srt.arg_groups.pipeline",
               "sglang.srt.model_executor.pool_configurator", "sglang.srt.configs.model_config")

from swa_kit.engine import routing
from swa_kit.launch.decide import decide
from swa_kit.launch.inputs import Launch
from swa_kit.launch.sglang_oracle import decide_with_sglang, sglang_version, window_expressions
from swa_kit.errors import LaunchRefusedError, UsageError

pytestmark = pytest.mark.sglang

MODELS = ["gemma4-31b", "gpt-oss-20b", "gpt-oss-120b", "gemma3-27b", "llama4-scout", "mimo-v2-flash"]
PLATFORMS = ["rocm-gfx942", "rocm-gfx950", "cuda-sm90", "cuda-sm100"]
BACKENDS = ["", "--attention-backend aiter", "--attention-backend triton",
            "--prefill-attention-backend aiter --decode-attention-backend triton"]
HYBRID = ["", "--disable-hybrid-swa-memory"]
SPECS = ["", ("--speculative-algorithm EAGLE --speculative-eagle-topk 1 --speculative-num-steps 3 "
             "--speculative-num-draft-tokens 4"), "--speculative-algorithm FROZEN_KV_MTP",
         ("--speculative-algorithm EAGLE3 --speculative-eagle-topk 4 --speculative-num-steps 3 "
         "--speculative-num-draft-tokens 8")]
PAGES = ["", "--page-size 16", "--page-size 64"]


def _launches() -> list[tuple[str, str, str]]:
    """Every model x platform x backend choice (96), each with a hybrid / speculative / page-size setting
    drawn by a fixed seed so that the set is the same every run and covers every value of every axis."""
    draw = random.Random(38756)
    cases = []
    for model, platform, backend in itertools.product(MODELS, PLATFORMS, BACKENDS):
        args = " ".join(a for a in (backend, draw.choice(HYBRID), draw.choice(SPECS), draw.choice(PAGES)) if a)
        cases.append((model, platform, args))
    return cases


LAUNCHES = _launches()
# The rules the drawn set meets rarely, each at least once: SGLang's refusals (speculative_hook.py
# _handle_eagle_family), its speculative defaults and the page sizes trtllm_mha and FA4 force (overrides.py).
RULES = [
    ("gpt-oss-20b", "cuda-sm100", "--prefill-attention-backend aiter --decode-attention-backend triton "
                                  "--speculative-algorithm EAGLE"),  # no topk given: SM100 falls to triton
    ("gpt-oss-20b", "cuda-sm100", "--speculative-algorithm EAGLE --speculative-eagle-topk 2"),  # topk without steps
    ("gemma4-31b", "cuda-sm100", "--speculative-algorithm EAGLE --speculative-num-draft-tokens 4"),
    ("gpt-oss-20b", "cuda-sm90", "--prefill-attention-backend aiter --decode-attention-backend triton "
                                 "--speculative-algorithm EAGLE --speculative-eagle-topk 1 --speculative-num-steps 2 "
                                 "--page-size 16"),  # topk 1 on pages > 1 is not "topk one": no fa3
    ("gpt-oss-20b", "rocm-gfx942", "--speculative-algorithm NEXTN"),
    ("gemma4-31b", "cuda-sm100", "--page-size 32"),
    ("gemma4-31b", "cuda-sm100", "--page-size 256"),
    ("mimo-v2-flash", "cuda-sm100", "--page-size 16"),
    ("mimo-v2-flash", "cuda-sm100", "--speculative-algorithm EAGLE3"),
    ("gpt-oss-20b", "cuda-sm90", "--speculative-algorithm NGRAM --page-size 16"),  # 10 branches on pages: refused
    ("gpt-oss-20b", "cuda-sm90", "--speculative-algorithm NGRAM --speculative-ngram-max-bfs-breadth 1 --page-size 16"),
    ("gpt-oss-20b", "rocm-gfx942", "--speculative-algorithm NGRAM"),
]
COMPARED = ("attention_backend", "prefill_attention_backend", "decode_attention_backend", "hybrid_swa_memory",
            "page_size", "pool_configurator", "full_tokens", "swa_tokens")


def _params():
    for case in LAUNCHES + RULES:
        yield pytest.param(*case, id=" ".join(case).replace(" --", " ").strip())


def test_the_launch_set_covers_every_axis():
    assert len(LAUNCHES) >= 40
    for value in (v for axis in (BACKENDS, HYBRID, SPECS, PAGES) for v in axis if v):
        assert any(value in args for _, _, args in LAUNCHES), value


@pytest.mark.parametrize("model, platform, args", list(_params()))
def test_bundled_tables_agree_with_sglang(model, platform, args):
    launch = Launch.from_inputs(model=model, server_args=args, platform=platform)
    try:
        theirs = decide_with_sglang(launch)
    except UsageError as refusal:  # SGLang refuses the launch at start-up: the kit must refuse it too
        assert "refuses this launch" in str(refusal)
        with pytest.raises(LaunchRefusedError, match="SGLang refuses this launch"):
            decide(launch)
        return
    ours = decide(launch)
    read = {r["decision"]: r for r in theirs.rows() if r["how"] == f"read from SGLang {sglang_version()}"}
    assert {"attention_backend", "hybrid_swa_memory", "page_size"} <= set(read), "SGLang answered too little"
    kit = {r["decision"]: r["value"] for r in ours.rows()}
    differ = {name: (kit[name], read[name]["value"]) for name in COMPARED
              if name in read and kit[name] != read[name]["value"]}  # pool_configurator: both SGLang's class name
    assert not differ, f"kit vs SGLang {sglang_version()}: {differ}"


def test_every_launch_compared_the_pool_sizes_where_there_is_a_hybrid_pool():
    launch = Launch.from_inputs(model="gemma4-31b", platform="rocm-gfx942")
    theirs = decide_with_sglang(launch)
    assert theirs.full_tokens.how.startswith("read from SGLang") and theirs.swa_tokens.how.startswith("read from")
    assert theirs.attention_backend.value == "triton"  # Gemma-4's own override, on ROCm too
    assert theirs.attention_backend.source.endswith("set by _gemma4_overrides")  # SGLang's own provenance


def test_the_kits_call_site_expressions_are_sglangs():
    """The window expressions the planner copies are exactly those in the installed aiter_backend.py."""
    theirs = {e.expression.replace("layer.sliding_window_size", "sws") for e in window_expressions()}
    ours = {s.window_expr for s in routing.SITES.values() if s.window_expr.startswith("(sws")}
    assert theirs and theirs == ours
