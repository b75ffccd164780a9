"""The speculative parameters SGLang 0.5.23 settles for a launch, and the launches it refuses.

Mirrors ``arg_groups/speculative_hook.py``: ``_handle_eagle_family`` (EAGLE, EAGLE3, STANDALONE; NEXTN is
EAGLE), ``_handle_ngram`` and the DFLASH family's one step of topk 1 (``_handle_dflash``, ``_handle_dspark``),
which run after the backend and page size are resolved. A refusal raises
:class:`~swa_kit.errors.LaunchRefusedError` in one line naming the rule, its source and the way out,
because SGLang would not start.
"""

from __future__ import annotations

from dataclasses import dataclass

from swa_kit.engine.spec_algorithms import EAGLE_FAMILY_HANDLER, NGRAM_HANDLER
from swa_kit.launch.backend import BackendChoice
from swa_kit.launch.inputs import Launch
from swa_kit.errors import LaunchRefusedError

#: The backends that run topk > 1 draft trees on pages > 1 (the two-pass cascade draft decode).
PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")
#: ``_auto_choose_speculative_params``: (steps, topk, draft tokens) for every architecture the kit reads
#: (SGLang picks (5, 4, 8) only for LlamaForCausalLM and Grok-1, which the kit does not read).
AUTO_PARAMS = (3, 1, 4)
#: ``arg_groups/fields/spec.py`` speculative_ngram_max_bfs_breadth and ``_handle_ngram``'s draft tokens.
NGRAM_BFS_BREADTH, NGRAM_DRAFT_TOKENS = 10, 12
_HOOK = f"sglang 0.5.23 arg_groups/speculative_hook.py {EAGLE_FAMILY_HANDLER}"


@dataclass(frozen=True)
class Speculation:
    """``speculative_num_steps``, ``speculative_eagle_topk``, ``speculative_num_draft_tokens`` as settled."""

    num_steps: int | None
    topk: int | None
    num_draft_tokens: int | None
    source: str


def _refused(rule: str, way_out: str) -> LaunchRefusedError:
    return LaunchRefusedError(f"SGLang refuses this launch: {rule} ({_HOOK}); {way_out}")


def _ngram(launch: Launch, choice: BackendChoice, page_size: int) -> Speculation:
    """``_handle_ngram``: topk is the BFS breadth (default 10); pages > 1 with topk > 1 run on flashinfer only."""
    args = launch.server_args
    topk = args.speculative_ngram_max_bfs_breadth or NGRAM_BFS_BREADTH
    drafts = args.speculative_num_draft_tokens or NGRAM_DRAFT_TOKENS
    steps = args.speculative_num_steps or drafts // topk
    if topk > 1 and page_size > 1 and choice.attention_backend != "flashinfer":
        raise LaunchRefusedError(
            f"SGLang refuses this launch: NGRAM drafts {topk} branches (--speculative-ngram-max-bfs-breadth) on "
            f"pages of {page_size} tokens, which only flashinfer runs, got attention_backend "
            f"{choice.attention_backend} (sglang 0.5.23 arg_groups/speculative_hook.py {NGRAM_HANDLER}); use "
            "--page-size 1, --speculative-ngram-max-bfs-breadth 1, or --attention-backend flashinfer")
    return Speculation(steps, topk, drafts, f"sglang 0.5.23 arg_groups/speculative_hook.py {NGRAM_HANDLER}")


def settle(launch: Launch, choice: BackendChoice, page_size: int) -> Speculation:
    """The settled speculative parameters; raises :class:`LaunchRefusedError` where SGLang refuses the launch."""
    args = launch.server_args
    steps, topk, drafts = args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens
    handler = launch.spec_algorithm.traits.handler
    if handler == NGRAM_HANDLER:
        return _ngram(launch, choice, page_size)
    if launch.spec_algorithm.traits.dflash_family:  # one block per step, one chain: whatever was given
        return Speculation(1, 1, drafts, f"sglang 0.5.23 arg_groups/speculative_hook.py {handler}: num_steps 1, "
                                         "topk 1; the draft block is --speculative-num-draft-tokens wide")
    if handler != EAGLE_FAMILY_HANDLER:
        return Speculation(steps, topk, drafts, "server arguments (no EAGLE-family resolution)")
    source = "server arguments"
    if steps is None:
        if topk is not None or drafts is not None:  # SGLang asserts both unset before choosing them itself
            given = "--speculative-eagle-topk" if topk is not None else "--speculative-num-draft-tokens"
            raise _refused(f"{given} is set without --speculative-num-steps",
                           "give --speculative-num-steps too, or drop it and let SGLang choose all three")
        (steps, topk, drafts), source = AUTO_PARAMS, f"{_HOOK}: _auto_choose_speculative_params"
    if topk is None:  # SGLang's start-up then compares None with 1 and stops with a TypeError
        raise _refused("--speculative-num-steps is set without --speculative-eagle-topk",
                       "give --speculative-eagle-topk too, or drop --speculative-num-steps and let SGLang choose "
                       "all three")
    if topk > 1 and "trtllm_mha" in (choice.prefill_attention_backend, choice.decode_attention_backend):
        raise _refused(f"trtllm_mha runs speculative topk 1 only, got --speculative-eagle-topk {topk}",
                       "use --speculative-eagle-topk 1, or another --attention-backend")
    if topk == 1 and drafts != steps + 1:
        drafts, source = steps + 1, f"{_HOOK}: topk 1 drafts steps + 1 tokens"
    if topk > 1 and page_size > 1 and choice.attention_backend not in PAGE_TREE_BACKENDS:
        raise _refused(f"speculative topk {topk} with page size {page_size} runs only on "
                       f"{', '.join(PAGE_TREE_BACKENDS)}, got attention_backend {choice.attention_backend}",
                       "use --page-size 1, --speculative-eagle-topk 1, or --attention-backend triton")
    return Speculation(steps, topk, drafts, source)
