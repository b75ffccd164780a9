"""The differential's mutation check: change one of the kit's rules in a copy of ``swa_kit/``, and
tests/differential.py must fail on it.

SGLang's answers do not read the kit's rules, so they are computed once, with the kit as it is, in a child
process (:func:`cache_sglang_answers`). Then, for each mutation, a fresh child runs only the kit's side of
:func:`differential.compare` on every launch, with ``PYTHONPATH`` on a temporary copy of ``swa_kit/`` in which
one rule is changed and ``differential.sglang_answer`` answering from the cache. A mutation is killed when one
launch gets a disagreement that tests/data/differential/expected.json does not list, or loses one that it
lists: exactly what fails tests/test_differential_sglang.py. An unmutated copy must show neither (the harness
itself can pass).

Each mutation names its file, an exact snippet of it and the snippet's replacement; a snippet that is not in its
file exactly once is an error, so a refactor can never turn a mutation into a silent no-op.

    python tests/mutation_check.py [--all] [--cache FILE] [NAME ...]

``--all`` runs every launch for each mutation and counts the launches that kill it (the default stops at the
first); ``--cache FILE`` keeps SGLang's answers between runs. Exit 0 when every mutation is killed and the
unmutated copy passes, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
KIT = ROOT / "swa_kit"
RESULT = "MUTATION-RESULT "


@dataclass(frozen=True)
class Mutation:
    """One rule of the kit changed: ``before`` (found exactly once in ``file``) becomes ``after``."""

    name: str
    file: str  # relative to swa_kit/
    before: str
    after: str
    rule: str


MUTATIONS: tuple[Mutation, ...] = (
    Mutation("ratio", "launch/pool_sizing.py", "RATIO_FALLBACK = 0.8", "RATIO_FALLBACK = 0.5",
             "--swa-full-tokens-ratio falls back to 0.8 (arg_groups/fields/schedule.py); here 0.5."),
    Mutation("default-backend-rocm", "launch/backend.py",
             'if launch.platform.is_hip:\n        return "aiter"',
             'if launch.platform.is_hip:\n        return "triton"',
             "get_default_attn_backend picks aiter on ROCm; here triton."),
    Mutation("default-backend-gpt-oss", "launch/backend.py",
             'if arch == "GptOssForCausalLM" and unset:\n'
             '        pick = _platform_pick(platform, "trtllm_mha", "fa3", "aiter", "triton")',
             'if arch == "GptOssForCausalLM" and unset:\n'
             '        pick = _platform_pick(platform, "trtllm_mha", "triton", "aiter", "triton")',
             "GPT-OSS's override picks fa3 on SM90 (model_overrides/gpt_oss.py); here triton."),
    Mutation("unified-key-count", "engine/call_sites.py",
             "return (sws - 1, 0) if sws > -1 else (-1, -1)", "return (sws, 0) if sws > -1 else (-1, -1)",
             "aiter's unified_attention gets (sws - 1, 0), so decode on the unified paths attends W - 1 keys; "
             "here (sws, 0), W keys."),
    Mutation("gemma4-window", "models/configs.py",
             '"Gemma4ForCausalLM": _arch("keys - 1", "gemma4_causal.py", True),\n'
             '    "Gemma4ForConditionalGeneration": _arch("keys - 1", "gemma4_causal.py", True),',
             '"Gemma4ForCausalLM": _arch("keys", "gemma4_causal.py", True),\n'
             '    "Gemma4ForConditionalGeneration": _arch("keys", "gemma4_causal.py", True),',
             "Gemma-4's model file passes sliding_window - 1 to RadixAttention; here the whole window."),
    Mutation("draft-pool", "launch/drafts.py",
             'pool = "own SWA pool (hybrid-SWA draft)"', 'pool = "own full pool"',
             "a hybrid-SWA draft (MiMoV2MTP) owns an SWA pool (eagle_draft_swa_num_layers); here a full pool."),
    Mutation("draft-swa-layers-in-budget", "launch/pool_sizing.py",
             "swa = min(len(config.swa_attention_layer_ids), count) if hybrid else 0", "swa = 0",
             "a hybrid-SWA draft's sliding layers go in the SWA cell (eagle_draft_swa_num_layers); here all in "
             "the full cell."),
    Mutation("draft-layers-in-budget", "launch/pool_sizing.py",
             "return DraftLayers(count - swa, swa, ", "return DraftLayers(0, 0, ",
             "an EAGLE / EAGLE3 / STANDALONE draft's layers count in the target's pool cells "
             "(resolve_spec_aux_hidden_state_config, PR #29622); here none."),
    Mutation("aiter-memory-cut", "launch/memory_fraction.py",
             "AITER_CUT, AITER_CUT_ABOVE = 0.85, 8192", "AITER_CUT, AITER_CUT_ABOVE = 1.0, 8192",
             "aiter with a context over 8192 cuts mem_fraction_static to 0.85 of itself (attention_hook.py); "
             "here no cut."),
    Mutation("tp-kv-heads", "launch/parallel.py",
             "return max(1, total_kv_heads // self.attn_tp_size)", "return max(1, total_kv_heads)",
             "each GPU keeps kv_heads // attention-TP ranks (ModelConfig.get_num_kv_heads); here every head."),
    Mutation("swa-floor", "launch/pool_sizing.py",
             "swa_cell, budget, how, full, swa, sws + page_size, refused,",
             "swa_cell, budget, how, full, swa, sws + 1, refused,",
             "validate_swa_pool_size's floor is sliding_window_size + page_size; here + 1."),
    Mutation("trtllm-pages", "launch/backend.py",
             "page, source = 64, (", "page, source = 32, (",
             "trtllm_mha moves a page size it does not take to 64 (_mla_backend_page_constraints); here 32."),
    Mutation("trtllm-on-rocm", "launch/refusals.py",
             'TRTLLM_MHA_PLATFORMS = ("cuda-sm90", "cuda-sm100")',
             'TRTLLM_MHA_PLATFORMS = ("cuda-sm90", "cuda-sm100", "rocm-gfx942", "rocm-gfx950")',
             "trtllm_mha is refused at start-up off SM90 / SM100 / SM120 (attention_hook.py); here ROCm passes."),
    Mutation("triton-rail-window", "engine/call_sites.py",
             "arg = rail if sws > -1 and rail is not None else -1", "arg = sws",
             "SGLang's Triton backend reads window layers through one rail cut at the runner's sliding_window_size "
             "(update_sliding_window_buffer; Gemma-3n: W - 1), and asserts where the runner has none; here each "
             "layer's own window."),
    Mutation("float32-kv-bytes", "launch/pool_sizing.py",
             'return 2 if model.dtype == "float32" else DTYPE_BYTES[model.dtype]', "return DTYPE_BYTES[model.dtype]",
             "SGLang serves a float32 checkpoint's KV cache in 16 bits (_get_and_verify_dtype); here 4 bytes."),
    Mutation("unified-page-major", "launch/refusals.py",
             'PAGE_MAJOR_BACKENDS = ("triton", "fa3", "fa4", "flashinfer", "trtllm_mha")',
             'PAGE_MAJOR_BACKENDS = ("triton", "fa3", "fa4", "flashinfer", "trtllm_mha", "aiter")',
             "unified memory implies the page-major layout, whose gate refuses aiter (kv_cache_hook.py "
             "handle_page_major_kv_layout); here aiter passes."),
    Mutation("unified-fused-draft", "launch/unified_memory.py",
             'if self.fused is not None and "full" in self.fused.lanes:\n            return self.full_entry',
             "if False:\n            return self.full_entry",
             "under unified memory an EAGLE draft's KV is fused into the target's full entries and priced there in "
             "the boot split (fused_entry_bytes, _unified_full_bytes_per_token); here the target's rows only."),
    Mutation("unified-dflash-fused", "engine/spec_algorithms.py",
             'devices=("cuda", "npu", "xpu"), unified_memory_backends=_MHA_AUDITED, unified_fuses_draft=True,',
             'devices=("cuda", "npu", "xpu"), unified_memory_backends=_MHA_AUDITED, unified_fuses_draft=False,',
             "under unified memory a DFLASH draft is fused into the target's entries too (_fused_draft_decision "
             "takes the DFLASH family); here it keeps a private pool."),
    Mutation("unified-dflash-fa4-region", "launch/pool_sizing.py",
             'own = kv_dtype_bytes(launch.draft_model, "auto") if backend == "fa4" and launch.draft_model else None',
             "own = None",
             "a DFLASH-family draft on fa4 keeps its fused region in its compute dtype beside an fp8 target "
             "(allow_target_draft_different_cache_dtype); here the target's KV dtype."),
    Mutation("dflash-trtllm-draft", "launch/drafts.py",
             'return "fa4" if launch.platform.name == "cuda-sm100" else fallback', "return given",
             "DFLASH keeps a trtllm_mha draft backend only for an all-sliding or causal draft, else falls back (fa4 "
             "on SM100; _resolve_dflash_draft_attention_backend); here it keeps trtllm_mha."),
    Mutation("unified-whole-budget", "launch/unified_memory.py",
             "whole = from_budget and budget is not None and launch.spec_algorithm.is_none()", "whole = False",
             "without speculation the unified buffer takes the whole KV budget floored to 4096 B "
             "(config_from_budget, _init_unified_swa_pools); here the boot split's bytes."),
    Mutation("unified-algorithms", "launch/refusals.py", "    if allowed is None:", "    if False:",
             "unified memory takes EAGLE, EAGLE3, DFLASH and DSPARK only (handle_unified_memory_pool); here any."),
    Mutation("sink-needs-window", "launch/refusals.py", "if args.speculative_draft_window_size is None:", "if False:",
             "--speculative-draft-sink-size requires --speculative-draft-window-size (handle_speculative_decoding); "
             "here it does not."),
    Mutation("dspark-markov-rank", "launch/refusals.py", "dspark_markov_rank(draft.hf_config) <= 0",
             "dspark_markov_rank(draft.hf_config) < 0",
             "DSPARK requires markov_rank > 0 in the draft's config (resolve_spec_aux_hidden_state_config); here 0 "
             "passes."),
    Mutation("dflash-draft-cell", "launch/pool_sizing.py",
             "(drafts.full * full_layer if eagle else drafts.own_cell_bytes)", "(drafts.full * full_layer)",
             "a DFLASH / DSPARK draft is priced at its own geometry (draft_kv_budget.py "
             "resolve_dflash_draft_cell_size); here at the target's per-layer size, as EAGLE's."),
    Mutation("dflash-target-routes", "engine/spec_algorithms.py",
             'target_routes_as="eagle", modelled_apart=_DFLASH_MODELLED)',
             "target_routes_as=None, modelled_apart=_DFLASH_MODELLED)",
             "DFLASH's target routes are EAGLE's (the same backend and linear TARGET_VERIFY); here none planned."),
    Mutation("spec-max-running-requests", "launch/pool_sizing.py",
             "max_running_requests or launch.spec_algorithm.traits.default_max_running_requests",
             "max_running_requests",
             "every speculative handler but UNO's sets max_running_requests 48 when unset (speculative_hook.py), so "
             "with the radix cache off the SWA pool is request-capped; here it stays unset."),
    Mutation("not-modelled", "launch/surface.py", "    if names:", "    if False:",
             "a surface SGLang serves and the kit does not model is refused by name (check_modelled); here the kit "
             "answers with its guess."),
)


class MutationError(RuntimeError):
    """A mutation that cannot be applied as written (its snippet is missing or not unique)."""


def apply(mutation: Mutation, kit: Path) -> None:
    """Change ``mutation``'s rule in the copy of the kit at ``kit`` (a ``swa_kit`` directory)."""
    path = kit / mutation.file
    if not path.is_file():
        raise MutationError(f"mutation {mutation.name!r}: swa_kit/{mutation.file} does not exist; update "
                            "tests/mutation_check.py MUTATIONS to the rule's new place")
    text = path.read_text()
    found = text.count(mutation.before)
    if found != 1:
        raise MutationError(f"mutation {mutation.name!r}: its snippet {mutation.before!r} is in swa_kit/"
                            f"{mutation.file} {found} times, not once; update tests/mutation_check.py MUTATIONS "
                            "to the rule as it is written now")
    path.write_text(text.replace(mutation.before, mutation.after))


def copy_kit(into: Path, mutation: Mutation | None) -> Path:
    """A copy of ``swa_kit/`` under ``into`` with ``mutation`` applied; the directory to put on PYTHONPATH."""
    shutil.copytree(KIT, into / "swa_kit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if mutation is not None:
        apply(mutation, into / "swa_kit")
    return into


def _child(args: list[str], pythonpath: Path, timeout: float) -> dict[str, Any]:
    """Run this file in a fresh interpreter with only ``pythonpath`` on PYTHONPATH; its result line, parsed."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    run = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], env=env, cwd=pythonpath,
                         capture_output=True, text=True, timeout=timeout, check=False)
    line = next((x for x in run.stdout.splitlines() if x.startswith(RESULT)), None)
    if run.returncode or line is None:
        raise RuntimeError(f"the child {' '.join(args[:1])} exited {run.returncode}: {run.stderr[-1500:]}")
    return json.loads(line[len(RESULT):])


def cache_sglang_answers(cache: Path, timeout: float = 900) -> dict[str, Any]:
    """SGLang's answer for every launch of the differential, computed once with the kit as it is."""
    with tempfile.TemporaryDirectory(prefix="swa-kit-mutation-") as tmp:
        return _child(["--sglang-side", str(cache)], copy_kit(Path(tmp), None), timeout)


def kit_side(mutation: Mutation | None, cache: Path, every_launch: bool = False,
             timeout: float = 300) -> dict[str, Any]:
    """The differential's verdict on a copy of the kit with ``mutation`` (None: unmutated).

    Returns ``checked`` (launches compared), ``killed_by`` (per killing launch: its unlisted and vanished
    disagreements, or the exception it raised), ``seconds`` (wall) and ``cpu_seconds`` (the child's user + system
    time, steadier on a shared machine); stops at the first killing launch unless ``every_launch``.
    """
    with tempfile.TemporaryDirectory(prefix="swa-kit-mutation-") as tmp:
        copy = copy_kit(Path(tmp), mutation)
        started, cpu = time.perf_counter(), _children_cpu()
        out = _child(["--kit-side", str(cache), *(["--all"] if every_launch else [])], copy, timeout)
    return {**out, "seconds": round(time.perf_counter() - started, 2), "cpu_seconds": round(_children_cpu() - cpu, 2)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- the children ---------------------------------------------------------------------------------------------


def _check_kit_is(copy: Path) -> None:
    import swa_kit

    where = Path(swa_kit.__file__).resolve()
    if not where.is_relative_to(copy.resolve()):
        raise MutationError(f"the child imported swa_kit from {where}, not from the copy under {copy}: the "
                            "installed kit shadows PYTHONPATH, so no mutation would be seen")


def _sglang_side(cache: Path) -> dict[str, Any]:
    import differential

    answers = {differential.launch_id(*case): differential.sglang_answer(*case) for case in differential.launches()}
    cache.write_bytes(pickle.dumps(answers))
    return {"launches": len(answers)}


def _kit_side(cache: Path, every_launch: bool) -> dict[str, Any]:
    import differential

    answers = pickle.loads(cache.read_bytes())
    expected = json.loads(differential.EXPECTED.read_text())

    def cached(model: str, platform: str, args: str) -> Any:
        launch = differential.launch_id(model, platform, args)
        if launch not in answers:
            raise MutationError(f"SGLang's cached answers lack {launch!r}: the launch set changed after the cache "
                                "was written; compute it again")
        return answers[launch]

    differential.sglang_answer = cached
    killed_by: list[dict[str, Any]] = []
    checked = 0
    for case in differential.launches():
        launch = differential.launch_id(*case)
        checked += 1
        try:
            differ = differential.compare(*case)
        except Exception as error:  # the differential test fails on a raise too
            killed_by.append({"launch": launch, "raised": f"{type(error).__name__}: {str(error)[:200]}"})
        else:
            listed = expected.get(launch, {})
            unlisted = {f: repr(v)[:200] for f, v in differ.items() if f not in listed}
            vanished = sorted(set(listed) - set(differ))
            if unlisted or vanished:
                killed_by.append({"launch": launch, "unlisted": unlisted, "vanished": vanished})
        if killed_by and not every_launch:
            break
    note = ("SGLang was imported on the kit's side: compare() asks SGLang outside sglang_answer(), so each "
            "mutation pays for it; cache that answer in tests/mutation_check.py") if "sglang" in sys.modules else ""
    return {"checked": checked, "killed_by": killed_by, "note": note}


# -- the command line ------------------------------------------------------------------------------------------


def _took(result: dict[str, Any]) -> str:
    return f"{result['checked']} launches, {result['seconds']} s, cpu {result['cpu_seconds']} s"


def check(names: list[str], cache: Path, every_launch: bool, out: Any = sys.stdout) -> int:
    """Run the unmutated copy and each named mutation (all when none named); print one line each."""
    unknown = sorted(set(names) - {m.name for m in MUTATIONS})
    if unknown:
        print(f"unknown mutations {unknown}; known: {', '.join(m.name for m in MUTATIONS)}", file=out)
        return 2
    started = time.perf_counter()
    if not cache.exists():
        cache_sglang_answers(cache)
        print(f"SGLang's answers cached in {time.perf_counter() - started:.1f} s: {cache}", file=out)
    sanity = kit_side(None, cache, every_launch=True)
    if sanity["killed_by"]:
        print(f"FAIL unmutated copy: {len(sanity['killed_by'])} launches disagree beyond expected.json, e.g. "
              f"{sanity['killed_by'][0]}", file=out)
    else:
        print(f"ok   unmutated copy passes ({_took(sanity)})", file=out)
    survivors = []
    for mutation in [m for m in MUTATIONS if not names or m.name in names]:
        result = kit_side(mutation, cache, every_launch)
        kills = result["killed_by"]
        if not kills:
            survivors.append(mutation.name)
            print(f"SURVIVED {mutation.name}: {mutation.rule} ({_took(result)})", file=out)
            continue
        count = f"by {len(kills)} launches" if every_launch else "by the first launch shown"
        print(f"killed {mutation.name} {count} ({_took(result)}): {kills[0]}", file=out)
        if result["note"]:
            print(f"  note: {result['note']}", file=out)
    print(f"{len(survivors)} survived{': ' + ', '.join(survivors) if survivors else ''}; "
          f"{time.perf_counter() - started:.1f} s in all", file=out)
    return 1 if sanity["killed_by"] or survivors else 0


def main(argv: list[str]) -> int:
    if argv[:1] in (["--sglang-side"], ["--kit-side"]):
        sys.path.insert(0, str(TESTS))
        _check_kit_is(Path.cwd())
        cache = Path(argv[1])
        result = _sglang_side(cache) if argv[0] == "--sglang-side" else _kit_side(cache, "--all" in argv)
        print(RESULT + json.dumps(result))
        return 0
    every_launch = "--all" in argv
    argv = [a for a in argv if a != "--all"]
    cache_at = None
    if "--cache" in argv:
        at = argv.index("--cache")
        cache_at, argv = Path(argv[at + 1]), argv[:at] + argv[at + 2:]
    if cache_at is not None:
        return check(argv, cache_at, every_launch)
    with tempfile.TemporaryDirectory(prefix="swa-kit-mutation-") as tmp:
        return check(argv, Path(tmp) / "sglang-answers.pickle", every_launch)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
