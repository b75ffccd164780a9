"""The differential's launches, and the kit's and SGLang's answers for each, field by field.

SGLang answers from the RAW launch (:func:`swa_kit.launch.sglang_oracle.ask_sglang`: its own parser, resolution,
spec-aux resolution, pool configurator and model classes; KV heads per GPU from ``get_num_kv_heads`` /
``get_swa_num_kv_heads``; the draft's model from ``ModelConfig(..., is_draft_model=True)``; each layer's prefill,
decode and verify route from its own aiter backend, :mod:`differential_routes`); the kit answers through
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
FIELDS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend", "page_size",
          "hybrid_swa_memory", "pool_configurator", "budget_bytes", "full_tokens", "swa_tokens", "one_pool_tokens",
          "swa_pool_floor", "draft_layers", "layer_windows", "kv_heads_per_gpu", "routes", "draft_pool")


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
    backends, its hybrid-pool rule), the draft sink size, the prefix tails, DFLASH, DSPARK and UNO."""
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
        ("gpt-oss-20b", "rocm-gfx950", f"--speculative-algorithm DFLASH {steps} --speculative-draft-model-path DRAFT "
                                       "--attention-backend aiter"),
        ("gpt-oss-20b", "cuda-sm90", f"--speculative-algorithm DFLASH {steps} --speculative-draft-model-path DRAFT "
                                     "--attention-backend triton"),
        ("gpt-oss-20b", "cuda-sm90", f"--speculative-algorithm DSPARK {steps} --speculative-draft-model-path DRAFT "
                                     "--attention-backend triton"),
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
    with_draft = draft_config is not None
    try:
        where = {"model": model} if bundled(model) else {"hf_config": CONFIGS[model]}
        launch = Launch.from_inputs(**where, server_args=kit_args, platform=platform,
                                    draft_hf_config=draft_config)
        d = decide(launch)
    except SwaKitError as error:  # the class, and the kit's one line (classify() reads a surface it names)
        return f"{type(error).__name__}: {str(error)[:300]}", {}
    pools = d.pools
    fields = {name: getattr(d, name).value for name in FIELDS[:6]}
    fields.update(budget_bytes=pools.budget_bytes, full_tokens=pools.full_tokens, swa_tokens=pools.swa_tokens,
                  swa_pool_floor=pools.floor_tokens if pools.hybrid else None)
    if pools.budget_bytes is not None:
        one = pools.budget_bytes // pools.default_pool_cell_bytes
        fields["one_pool_tokens"] = one // d.page_size.value * d.page_size.value
    draft = d.draft_pool.value
    fields["draft_layers"] = draft.layout.num_layers if with_draft and draft.layout is not None else None
    fields["layer_windows"] = {i: launch.model.layer_kind(i).sliding_window_size
                               for i in range(launch.model.num_layers)}
    fields["kv_heads_per_gpu"] = _kit_kv_heads(launch)
    fields["routes"] = _kit_routes(d, _route_modes(args)) if _aiter_routes(d.prefill_attention_backend.value,
                                                                           d.decode_attention_backend.value) else None
    owns = draft.layout is not None and draft.pool.startswith("own")
    fields["draft_pool"] = {"architecture": draft.layout.architecture,
                            "hybrid_swa": draft.pool.startswith("own SWA pool")} if owns else None
    if pools.refused:
        return "refused: SWA pool under its floor", fields
    return None, fields


def _kit_kv_heads(launch: Any) -> dict[str, int]:
    """KV heads one GPU keeps for the full-pool and the SWA-pool layers (one kind stands for both when the model
    has only one; a model whose layers of one pool differ in KV heads answers the largest)."""
    from swa_kit.launch.parallel import parallel_of

    parallel = parallel_of(launch.server_args)
    kinds = launch.model.kinds.values()
    full = [k.num_kv_heads for k in kinds if not k.uses_swa_pool] or [k.num_kv_heads for k in kinds]
    swa = [k.num_kv_heads for k in kinds if k.uses_swa_pool] or full
    return {"full": parallel.kv_heads_per_gpu(max(full)), "swa": parallel.kv_heads_per_gpu(max(swa))}


def _route_modes(args: str) -> tuple[str, ...]:
    """The target's forward modes the differential drives: verify only where the launch speculates."""
    modes: tuple[str, ...] = ("prefill", "extend", "decode")
    if "--speculative-algorithm" in args:
        modes += ("verify",)
    # the draft's decode is driven for a draft with a full pool of its own only (differential_routes' limit)
    return (*modes, "draft_decode") if "DRAFT" in args.split() else modes


def _aiter_routes(prefill: str, decode: str) -> bool:
    """Routes are compared where aiter serves both prefill and decode (the backend the kit plans)."""
    return prefill == decode == "aiter"


def _kit_routes(d: Any, modes: tuple[str, ...]) -> dict[str, Any]:
    """The kit's target plans per mode and layer, in the shape of ``differential_routes.routes``."""
    from differential_routes import GUARD

    out: dict[str, Any] = {}
    for mode in modes:
        plan = d.routes.get(("draft", mode) if mode.startswith("draft_") else ("target", mode))
        out[mode] = None if plan is None else {
            # SGLang's guard refuses before any kernel; a kernel's own refusal (CK's head-dim cap) happens inside the
            # kernel, which SGLang's side records as called
            layer.layer: GUARD if layer.sglang_verdict is not None and layer.site == "decode.paged" else
            [layer.kernel, None if layer.window_arg is None else list(layer.window_arg), layer.page_table,
             layer.effective_keys] for layer in plan.layers}
    return out


def sglang_answer(model: str, platform: str, args: str) -> tuple[str | None, dict[str, Any]]:
    from swa_kit.launch.inputs import Platform
    from swa_kit.launch.sglang_oracle import ask_sglang

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
        # a class that does not build here: SGLang may still refuse the launch at start-up, before any model is
        # built (Gemma-4 text-only); past start-up, ask_sglang says the class does not build, never guesses
        answer = ask_sglang(argv, platform, memory, built=None if isinstance(built, str) else built)
        if not answer.refused:
            answer.fields["draft_pool"] = sglang_draft_pool(answer.server_args, platform)
    if answer.refused:
        return answer.refused, answer.fields
    assert not isinstance(built, str)  # ask_sglang raised past start-up
    windows = built.layer_windows
    routes: Any = None
    if _aiter_routes(answer.fields["prefill_attention_backend"], answer.fields["decode_attention_backend"]):
        from differential_routes import routes as sglang_routes

        draft = sglang_built()[DRAFT_KEYS[placeholder]] if placeholder else None
        routes = sglang_routes(
            answer.server_args, answer.model_config, answer.fields["page_size"], answer.fields["hybrid_swa_memory"],
            windows, _route_modes(args), None if draft is None or isinstance(draft, str) else draft.layer_windows)
    return answer.refused, {**answer.fields, "layer_windows": windows, "routes": routes}


def sglang_draft_pool(sa: Any, platform: str) -> dict[str, Any] | None:
    """The draft worker's model as SGLang reads it (``ModelConfig.from_server_args(..., is_draft_model=True)``,
    as ``spec_aux_hidden_state`` and the scheduler do): its architecture, and whether its own KV pool is an SWA
    pool (``ModelConfig.is_hybrid_swa``)."""
    from swa_kit.launch.sglang_oracle import PLATFORM_FACTS, hidden_aiter, import_sglang

    if sa.speculative_algorithm is None:
        return None
    model_config = import_sglang("sglang.srt.configs.model_config")
    runtime = import_sglang("sglang.srt.runtime_context")
    with runtime.override_platform(**PLATFORM_FACTS[platform]), hidden_aiter():
        draft = model_config.ModelConfig.from_server_args(sa, model_path=sa.speculative_draft_model_path,
                                                          is_draft_model=True)
    return {"architecture": draft.hf_config.architectures[0], "hybrid_swa": bool(draft.is_hybrid_swa)}


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
    kit_refused, kit = kit_answer(model, platform, args)
    sg_refused, sg = sglang_answer(model, platform, args)
    if kit_refused or sg_refused:
        # the kit's not-modelled refusal says SGLang serves the launch: where SGLang refuses, the kit missed the rule
        if bool(kit_refused) != bool(sg_refused) or str(kit_refused).startswith(NOT_MODELLED):
            return {"refusal": (kit_refused, sg_refused)}
        return {}
    return {name: (kit.get(name), sg.get(name)) for name in FIELDS if kit.get(name) != sg.get(name)}


#: how the kit's refusal of a surface it does not model begins (swa_kit.launch.surface check_modelled)
NOT_MODELLED = "NotModelledError: the kit does not model "


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
