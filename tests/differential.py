"""The differential's launches, and the kit's and SGLang's answers for each, field by field.

SGLang answers from the RAW launch (:func:`swa_kit.launch.sglang_oracle.ask_sglang`: its own parser, resolution,
spec-aux resolution, pool configurator and model classes; KV heads per GPU from ``get_num_kv_heads`` /
``get_swa_num_kv_heads``; the draft's model from ``ModelConfig(..., is_draft_model=True)``; each layer's prefill,
extend, decode, verify and draft decode route from its own backend class where aiter or triton serves both prefill
and decode, :mod:`swa_kit.measure.sglang_routes` and :mod:`swa_kit.measure.sglang_triton_routes`; trtllm_mha's and
the other backends' routes are not compared); the kit answers through
``Launch.from_inputs`` + ``decide`` with the same words. ``python tests/differential.py --write-expected``
rewrites the list of known disagreements (tests/data/differential/expected.json), each with its class; review the
diff before committing.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from swa_kit.measure import sglang_check

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {**{p.stem: p for p in sorted((ROOT / "data" / "models").glob("*.json"))},
           **{p.stem: p for p in sorted((ROOT / "tests" / "data" / "differential").glob("*.json"))
              if not p.stem.startswith(("draft-", "expected"))}}
DRAFT = ROOT / "tests" / "data" / "differential" / "draft-llama-2l.json"
#: the draft each launch's placeholder names: DRAFT (full attention) or DRAFT_SWA (hybrid-SWA, STANDALONE only)
DRAFTS = {"DRAFT": DRAFT, "DRAFT_SWA": ROOT / "tests" / "data" / "differential" / "draft-gpt-oss-2l.json",
          "DRAFT_DSPARK": ROOT / "tests" / "data" / "differential" / "draft-dspark-2l.json"}
EXPECTED = ROOT / "tests" / "data" / "differential" / "expected.json"
#: each draft's entry among sglang_built(), by its placeholder
DRAFT_KEYS = {"DRAFT": "draft", "DRAFT_SWA": "draft-swa", "DRAFT_DSPARK": "draft-dspark"}
PLATFORMS = ["rocm-gfx942", "rocm-gfx950", "cuda-sm90", "cuda-sm100"]
BACKENDS = ["", "aiter", "triton", "fa3", "trtllm_mha"]
SPECS = ["", "EAGLE draft", "EAGLE3 draft", "STANDALONE draft", "NEXTN"]
TPS = [1, 2, 4, 8]
FIELDS = sglang_check.FIELDS


def launches(n_per_model: int = 20, seed: int = 34) -> list[tuple[str, str, str]]:
    """(model, platform, server args) drawn with a fixed seed so every run compares the same set; each model draws
    from its own stream, so adding a config leaves the other models' launches as they were."""
    out = []
    for model in CONFIGS:
        draw = random.Random(f"{seed}-{model}")
        for i in range(n_per_model):
            words = [f"--tp {TPS[i % 4]}", f"--mem-fraction-static {draw.choice(['0.85', '0.8'])}"]
            backend = BACKENDS[(i // 4) % len(BACKENDS)] if i < 20 else draw.choice(BACKENDS)
            if backend:
                words.append(f"--attention-backend {backend}")
            spec = draw.choice(SPECS)
            if spec:
                algorithm = spec.split()[0]
                words.append(f"--speculative-algorithm {algorithm} --speculative-num-steps 3 "
                             "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
                if spec.endswith("draft"):
                    words.append("--speculative-draft-model-path DRAFT")
            if draw.random() < 0.3:
                words.append("--disable-hybrid-swa-memory")
            if draw.random() < 0.5:
                words.append("--context-length 32768")
            if draw.random() < 0.3:
                words.append(f"--page-size {draw.choice([16, 64])}")
            out.append((model, PLATFORMS[(i + i // 4) % 4], " ".join(words)))
    out.append(("gemma4-31b", "rocm-gfx942", "--attention-backend fa9"))  # a name SGLang's parser rejects
    # Every model behind the hybrid-SWA draft (its sliding layer in the SWA budget, or turned off with the target's
    # hybrid pool), drawn apart so the launches above stay as they were.
    spec = ("--speculative-algorithm STANDALONE --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4 --speculative-draft-model-path DRAFT_SWA")
    for i, model in enumerate(CONFIGS):
        out.append((model, PLATFORMS[i % 4], f"--tp {TPS[i % 3]} --mem-fraction-static 0.85 {spec}"))
    return out + surface_launches()


def surface_launches() -> list[tuple[str, str, str]]:
    """SGLang 0.5.23's SWA surfaces beyond the draw (issue 34, item 3), each where SGLang refuses it at start-up and
    where it serves it: unified memory (its page-major backend gate, its algorithm allow-list, its per-algorithm
    backends, its hybrid-pool rule, its buffer and fused draft), the draft sink size, the prefix tails, DFLASH,
    DSPARK and UNO."""
    steps = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
    unified = "--enable-unified-memory"
    return [
        ("gpt-oss-20b", "rocm-gfx950", f"{unified} --attention-backend aiter"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend flashinfer"),
        ("gemma4-31b", "cuda-sm100", f"{unified} --attention-backend triton --tp 2"),
        ("gemma3-27b", "cuda-sm90", f"{unified} --attention-backend triton"),
        ("mimo-v2-flash", "cuda-sm90", f"{unified} --attention-backend flashinfer --tp 8"),
        ("mimo-v2-flash", "cuda-sm90", f"{unified} --attention-backend triton --tp 8"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton --speculative-algorithm FROZEN_KV_MTP "
                                     f"{steps}"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton --speculative-algorithm STANDALONE "
                                     f"{steps} --speculative-draft-model-path DRAFT"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton --speculative-algorithm EAGLE {steps} "
                                     "--speculative-draft-model-path DRAFT"),
        ("gpt-oss-20b", "cuda-sm100", f"{unified} --attention-backend fa4 --speculative-algorithm EAGLE {steps} "
                                      "--speculative-draft-model-path DRAFT"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend trtllm_mha --speculative-algorithm DFLASH "
                                     f"{steps} --speculative-draft-model-path DRAFT"),
        # unified memory's buffer and fused draft (swa_kit.launch.unified_memory): a window draft on the triton rail
        # and off it, a path-less EAGLE with nothing to fuse, pages and TP, a buffer under its bs=1 floor
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton --speculative-algorithm EAGLE {steps} "
                                     "--speculative-draft-model-path DRAFT_SWA --page-size 16"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend fa3 --speculative-algorithm EAGLE {steps} "
                                     "--speculative-draft-model-path DRAFT_SWA"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton --speculative-algorithm EAGLE {steps}"),
        ("gpt-oss-120b", "cuda-sm100", f"{unified} --attention-backend trtllm_mha --page-size 64 --tp 4"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton --max-total-tokens 64"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton --disable-hybrid-swa-memory"),
        # a path-less MTP draft: the target rewritten to its MTP form, its window layer fused into the SWA entries
        ("mimo-v2-flash", "cuda-sm90", f"{unified} --attention-backend triton --tp 8 --speculative-algorithm EAGLE "
                                       f"{steps}"),
        ("gemma4-31b", "cuda-sm100", f"{unified} --attention-backend triton --speculative-algorithm NEXTN {steps}"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton --disable-hybrid-swa-memory "
                                     f"--speculative-algorithm EAGLE {steps} --speculative-draft-model-path DRAFT"),
        # the DFLASH family's draft fused too (_fused_draft_decision): DSPARK's, a window draft's lanes in both
        # sub-pools, one declined off the triton rail (a private pool priced in the boot split), an fa4 draft's
        # region in its compute dtype beside an fp8 target
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton --speculative-algorithm DSPARK {steps} "
                                     "--speculative-draft-model-path DRAFT_DSPARK"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton --speculative-algorithm DFLASH {steps} "
                                     "--speculative-draft-model-path DRAFT_SWA --page-size 16"),
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend fa3 --speculative-algorithm DFLASH {steps} "
                                     "--speculative-draft-model-path DRAFT_SWA"),
        ("gpt-oss-20b", "cuda-sm100", f"{unified} --attention-backend fa4 --kv-cache-dtype fp8_e4m3 "
                                      f"--speculative-algorithm DSPARK {steps} --speculative-draft-model-path "
                                      "DRAFT_DSPARK"),
        # DFLASH keeps trtllm_mha only for an all-sliding or causal draft: this one falls back to fa4 on SM100, so
        # its fused region is bf16 beside the fp8 target
        ("gpt-oss-20b", "cuda-sm100", f"{unified} --attention-backend trtllm_mha --kv-cache-dtype fp8_e4m3 "
                                      f"--speculative-algorithm DFLASH {steps} --speculative-draft-model-path DRAFT"),
        # a draft KV dtype of its own, which the kit refuses by name (SGLang declines the fusion for it): the one
        # launch of the set the kit does not model, so the mutation check's not-modelled rule has a launch to fail
        ("gpt-oss-20b", "cuda-sm90", f"{unified} --attention-backend triton --speculative-algorithm DFLASH {steps} "
                                     "--speculative-draft-model-path DRAFT "
                                     "--speculative-draft-kv-cache-dtype fp8_e4m3"),
        ("gpt-oss-20b", "rocm-gfx950", f"--speculative-algorithm DFLASH {steps} --speculative-draft-model-path DRAFT "
                                       "--attention-backend aiter"),
        ("gpt-oss-20b", "cuda-sm90", f"--speculative-algorithm DFLASH {steps} --speculative-draft-model-path DRAFT "
                                     "--attention-backend triton"),
        ("gpt-oss-20b", "cuda-sm90", f"--speculative-algorithm DSPARK {steps} --speculative-draft-model-path DRAFT "
                                     "--attention-backend triton"),
        ("gpt-oss-20b", "rocm-gfx942", f"--speculative-algorithm DFLASH {steps}"),
        ("gpt-oss-20b", "cuda-sm90", f"--speculative-algorithm DFLASH {steps} --speculative-draft-model-path DRAFT "
                                     "--pp-size 2"),
        ("gpt-oss-20b", "cuda-sm90", f"--speculative-algorithm DFLASH {steps} --speculative-draft-model-path DRAFT "
                                     "--speculative-draft-window-size 2"),
        ("gpt-oss-120b", "rocm-gfx942", f"--speculative-algorithm DFLASH {steps} --speculative-draft-model-path "
                                        "DRAFT --speculative-draft-window-size 64 --tp 2 --page-size 16"),
        ("gpt-oss-20b", "rocm-gfx950", f"--speculative-algorithm DSPARK {steps} --speculative-draft-model-path "
                                       "DRAFT_DSPARK --attention-backend aiter --tp 2"),
        ("gpt-oss-20b", "cuda-sm90", f"--speculative-algorithm EAGLE {steps} --speculative-draft-model-path DRAFT "
                                     "--speculative-draft-window-size 64 --speculative-draft-sink-size 4 "
                                     "--attention-backend triton"),
        # every speculative handler but UNO's sets max_running_requests 48, so the radix cache off caps the SWA pool
        ("gpt-oss-20b", "rocm-gfx950", f"--speculative-algorithm DFLASH {steps} --speculative-draft-model-path DRAFT "
                                       "--attention-backend aiter --disable-radix-cache --mem-fraction-static 0.8"),
        ("gpt-oss-120b", "cuda-sm90", f"--speculative-algorithm EAGLE {steps} --speculative-draft-model-path DRAFT "
                                      "--disable-radix-cache --tp 2"),
        ("gpt-oss-20b", "cuda-sm90", f"--speculative-algorithm DSPARK {steps} --speculative-draft-model-path "
                                     "DRAFT_DSPARK --attention-backend triton"),
        ("gpt-oss-20b", "rocm-gfx942", "--speculative-algorithm UNO --uno-lora-path /tmp/uno-lora"),
        ("gpt-oss-20b", "rocm-gfx942", "--speculative-algorithm UNO --uno-lora-path /tmp/uno-lora "
                                       "--speculative-num-draft-tokens 4"),
        ("gpt-oss-20b", "cuda-sm90", "--speculative-algorithm UNO --uno-lora-path /tmp/uno-lora "
                                     "--speculative-num-draft-tokens 4 --attention-backend fa3 --tp 2"),
        ("gpt-oss-20b", "cuda-sm90", "--speculative-algorithm UNO --uno-lora-path /tmp/uno-lora "
                                     "--speculative-num-draft-tokens 4 --attention-backend fa3"),
        ("gpt-oss-20b", "rocm-gfx942", "--speculative-algorithm UNO --uno-lora-path /tmp/uno-lora "
                                       "--speculative-draft-model-path DRAFT"),
        ("gpt-oss-20b", "rocm-gfx942", "--speculative-algorithm UNO"),
        ("gpt-oss-20b", "cuda-sm90", f"--speculative-algorithm EAGLE {steps} --speculative-draft-model-path DRAFT "
                                     "--speculative-draft-sink-size 4"),
        ("gpt-oss-20b", "cuda-sm90", f"--speculative-algorithm EAGLE {steps} --speculative-draft-model-path DRAFT "
                                     "--speculative-draft-window-size 64 --speculative-draft-sink-size -1"),
        ("gpt-oss-20b", "cuda-sm90", f"--speculative-algorithm EAGLE {steps} --speculative-draft-model-path DRAFT "
                                     "--speculative-draft-window-size 64 --speculative-draft-sink-size 4"),
        ("gpt-oss-20b", "rocm-gfx942", "--swa-prefix-tails 2"),
        ("gpt-oss-120b", "rocm-gfx950", "--swa-prefix-tails 0 --tp 4"),
        ("gemma4-31b", "rocm-gfx950", "--swa-prefix-tails -1"),
    ]


def architecture(model: str) -> str:
    """The model class a launch's config names (``architectures[0]``, as SGLang's registry reads it)."""
    raw = json.loads(CONFIGS[model].read_text())
    return str(raw.get("hf_config", raw)["architectures"][0])


def bundled(model: str) -> bool:
    return CONFIGS[model].parent.name == "models"


def launch_id(model: str, platform: str, args: str) -> str:
    return f"{model} {platform} {args}".strip()


def _kit_args(args: str) -> tuple[str, Path | None]:
    """The launch's words without the draft's placeholder path, and the draft's config it names (or None)."""
    words = args.split()
    if "--speculative-draft-model-path" not in words:
        return args, None
    at = words.index("--speculative-draft-model-path")
    return " ".join(words[:at] + words[at + 2:]), DRAFTS[words[at + 1]]


def kit_answer(model: str, platform: str, args: str) -> tuple[str | None, dict[str, Any]]:
    """The kit's refusal (the error class) or its fields for the launch."""
    from swa_kit.errors import SwaKitError
    from swa_kit.launch.decide import decide
    from swa_kit.launch.inputs import Launch

    kit_args, draft_config = _kit_args(args)
    try:
        where = {"model": model} if bundled(model) else {"hf_config": CONFIGS[model]}
        launch = Launch.from_inputs(**where, server_args=kit_args, platform=platform,
                                    draft_hf_config=draft_config)
        d = decide(launch)
    except SwaKitError as error:  # the class, and the kit's one line (classify() reads a surface it names)
        return f"{type(error).__name__}: {str(error)[:300]}", {}
    kit = sglang_check.kit_side(launch, d)
    return kit.refused, kit.fields


def sglang_answer(model: str, platform: str, args: str) -> tuple[str | None, dict[str, Any]]:
    from swa_kit.launch.inputs import Platform

    memory = Platform.parse(platform).gpu_memory_bytes
    with tempfile.TemporaryDirectory(prefix="swa-kit-diff-") as tmp:
        raw = json.loads(CONFIGS[model].read_text())
        (Path(tmp) / "m").mkdir()
        (Path(tmp) / "m" / "config.json").write_text(json.dumps(raw.get("hf_config", raw)))
        (Path(tmp) / "d").mkdir()
        placeholder = next((w for w in args.split() if w in DRAFTS), None)
        (Path(tmp) / "d" / "config.json").write_text(DRAFTS[placeholder or "DRAFT"].read_text())
        argv = ["--model-path", str(Path(tmp) / "m"),
                *[str(Path(tmp) / "d") if w in DRAFTS else w for w in args.split()]]
        built = sglang_built()[model]
        draft = sglang_built()[DRAFT_KEYS[placeholder]] if placeholder else None
        answer = sglang_check.sglang_side(argv, platform, memory, built, draft=draft)
    return answer.refused, answer.fields


_SGLANG_BUILT: dict[str, Any] = {}


def sglang_built() -> dict[str, Any]:
    """Each config's SGLang model class built on the meta device (once, in a child process): its per-layer
    windows and the runner's sliding_window_size, or why it did not build."""
    from swa_kit.launch.sglang_oracle import built_models_apart

    if not _SGLANG_BUILT:
        with tempfile.TemporaryDirectory(prefix="swa-kit-diff-") as tmp:
            dirs = {}
            for name, path in {**CONFIGS, **{DRAFT_KEYS[w]: p for w, p in DRAFTS.items()}}.items():
                raw = json.loads(path.read_text())
                (Path(tmp) / name).mkdir()
                (Path(tmp) / name / "config.json").write_text(json.dumps(raw.get("hf_config", raw)))
                dirs[str(Path(tmp) / name)] = name
            _SGLANG_BUILT.update({dirs[d]: b for d, b in built_models_apart(list(dirs)).items()})
    return _SGLANG_BUILT


def compare(model: str, platform: str, args: str) -> dict[str, tuple[Any, Any]]:
    """Every compared field that differs: name -> (kit, SGLang); ``refusal`` when one side refuses."""
    kit = sglang_check.Side(*kit_answer(model, platform, args))
    sg = sglang_check.Side(*sglang_answer(model, platform, args))
    return sglang_check.differences(kit, sg, FIELDS)


NOT_MODELLED = sglang_check.NOT_MODELLED + ": the kit does not model "


def classify(model: str, args: str, field: str, differ: dict[str, Any] | None = None) -> str:
    """A disagreement's class, for review (``differ``: the launch's other differing fields). The earlier classes
    (draft layers, TP, aiter's cut, one-pool geometry, context-length refusal, the runner's window, meta builds) were
    traced to the kit or the oracle and fixed, so only causes read from the launch's facts are named here."""
    if field == "refusal":
        kit_refused = str((differ or {}).get("refusal", (None, None))[0] or "")
        if kit_refused.startswith(NOT_MODELLED) and not differ["refusal"][1]:  # the kit refuses by name, not guess
            return f"not modelled by the kit: {kit_refused[len(NOT_MODELLED):].split(': SGLang accepts')[0]}"
        if "mem_cache/kv_cache_configurator.py" in kit_refused:  # raised in init_memory_pool, after model load
            return ("SGLang refuses it when it builds the pools (mem_cache/kv_cache_configurator.py), past the "
                    "start-up and sizing the oracle runs")
        return "UNCLASSIFIED: one side refuses the launch, the other does not"
    if field == "routes" and isinstance(sglang_built()[model], str):
        return "SGLang's model class did not build on the meta device here, so its routes are not compared"
    if field in ("layer_windows", "routes") and _kv_shared_layers(model):
        return ("Gemma-3n's KV-shared layers (num_kv_shared_layers) build no RadixAttention in SGLang's model class; "
                "the kit plans them as layers of their own")
    if field == "draft_pool" and "NEXTN" in args and "DRAFT" not in args:
        return ("NEXTN without a draft path: SGLang reads the target's own config as the draft (ModelConfig, "
                "is_draft_model); the kit assumes a one-layer EAGLE head")
    if field == "routes" and {"prefill_attention_backend", "decode_attention_backend"} & set(differ or {}):
        return "the routes follow the attention backend, which differs (prefill/decode_attention_backend)"
    return "UNCLASSIFIED: not yet traced to the kit or the oracle"


def _kv_shared_layers(model: str) -> int:
    raw = json.loads(CONFIGS[model].read_text())
    raw = raw.get("hf_config", raw)
    return int(raw.get("num_kv_shared_layers") or raw.get("text_config", {}).get("num_kv_shared_layers") or 0)


def main() -> int:
    if "--write-expected" not in sys.argv:
        print(__doc__)
        return 2
    expected: dict[str, dict[str, str]] = {}
    for case in launches():
        differ = compare(*case)
        if differ:
            expected[launch_id(*case)] = {f: classify(case[0], case[2], f, differ) for f in sorted(differ)}
    EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print(f"{len(expected)} launches with known disagreements written to {EXPECTED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
