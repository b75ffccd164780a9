"""SGLang's speculative algorithms and what each means for the kit: the kit's one list of them.

:class:`SpeculativeAlgorithm` mirrors SGLang 0.5.23's enum of that name (``speculative/spec_info.py``) with its
predicates (``is_eagle()``, ``is_frozen_kv_mtp()``, ...), so the resolvers read the kit's runners and SGLang's
alike. Each member also carries its :class:`Traits`, which every other module reads instead of keeping a list:

* the draft: whether a draft model runs at all (NGRAM looks its drafts up in the context), whether it writes KV
  into a pool of its own (EAGLE, EAGLE3, STANDALONE, DFLASH) or reads the target's (FROZEN_KV_MTP, whose own pool
  is a 64-token dummy), and so which row of the fixed resolver's table applies to it
  (:attr:`Traits.resolver_rule`, :mod:`swa_kit.engine.resolver`);
* start-up: the ``arg_groups/speculative_hook.py`` handler SGLang settles its steps, topk and draft tokens with
  (the kit mirrors ``_handle_eagle_family`` and ``_handle_ngram``), whether it drafts one chain only or has its
  topk set to 1 (``model_override_base.py _forces_eagle_topk_one``), and whether a draft without its own config is
  the target's config rewritten to its MTP architecture;
* whether the kit mirrors its workers and plans its routes (:attr:`Traits.kit_plans`); the others are named in
  the audit as not planned, except that the target's own routes of the DFLASH family are EAGLE's
  (:attr:`Traits.target_routes_as`): the target worker, its backend and its linear-chain ``TARGET_VERIFY`` are the
  same (``DFlashVerifyInput``, topk 1), and only the draft differs.

``--speculative-algorithm`` also takes the :data:`ALIASES`: NEXTN is SGLang's own alias of EAGLE
(``speculative/spec_registry.py _RESERVED_ALIASES``); the kit reads MTP as EAGLE too, a name SGLang 0.5.23 itself
does not take. SGLang 0.5.23's DFLASH and DSPARK (one family, ``is_dflash_family()``) run a draft model whose KV
pool of its own is priced by its own geometry in the target's budget (:mod:`swa_kit.launch.pool_sizing`); the
draft runs one block forward per step on its own draft backend, never aiter
(``_resolve_dflash_draft_attention_backend``). UNO drafts with the target itself and a LoRA: no draft model, no
draft pool (``UnoWorkerV2.draft_worker`` is None). All three run only on the devices :attr:`Traits.devices` names
(``_handle_dflash``, ``_handle_dspark``, ``_handle_uno``). ROCm's torch device is ``cuda``, so those checks pass
there; a CPU launch is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from swa_kit.errors import ModelConfigError
from swa_kit.sglang_versions import has_fix

EAGLE_FAMILY_HANDLER = "_handle_eagle_family"
SPEC_MAX_RUNNING_REQUESTS = 48  # the speculative handlers' max_running_requests when it is unset
NGRAM_HANDLER = "_handle_ngram"


@dataclass(frozen=True)
class Traits:
    """What one speculative algorithm means for the kit."""

    draft_model: bool = False  # a draft model runs beside the target
    owns_kv_pool: bool = False  # the draft writes KV into a pool of its own
    reads_target_pool: bool = False  # the draft's attention reads the target's KV pool
    sglang_is_eagle: bool = False  # SGLang's is_eagle(): EAGLE's scheduling (FROZEN_KV_MTP too, STANDALONE not)
    handler: str | None = None  # the speculative_hook.py function that settles its steps / topk / draft tokens
    single_chain: bool = False  # it drafts one chain: speculative topk must be 1
    topk_forced_to_one: bool = False  # its handler sets topk 1, so the default backend counts topk as settled
    mtp_draft_from_target: bool = False  # no draft config: the target's config rewritten to its MTP architecture
    kit_plans: bool = False  # the kit mirrors its workers and plans its routes
    devices: tuple[str, ...] | None = None  # the device prefixes its handler accepts (None: no check of its own)
    # --enable-unified-memory (kv_cache_hook.py handle_unified_memory_pool): the attention backends it runs on
    # there (None: the algorithm is refused); whether its draft's KV is fused into a hybrid target's pages
    # (kv_cache_configurator.py _fused_draft_decision: EAGLE's and the DFLASH family's); and whether a draft that
    # cannot fuse is refused (EAGLE's: its hook needs a hybrid target, _fused_draft_for_swa_factory refuses an
    # unfused draft) rather than kept in a private pool priced in the boot split (the DFLASH family's)
    unified_memory_backends: tuple[str, ...] | None = None
    unified_fuses_draft: bool = False
    unified_refuses_unfused: bool = False
    dflash_family: bool = False  # SGLang's is_dflash_family(): decode prepared by DFlashDraftInputV2
    target_routes_as: str | None = None  # a planned algorithm whose target routes this one's target shares
    modelled_apart: str = ""  # without kit_plans: what the kit models of it all the same (swa_kit.launch.surface)

    @property
    def default_max_running_requests(self) -> int | None:
        """What its ``speculative_hook.py`` handler sets ``max_running_requests`` to when unset (every handler but
        UNO's declares 48); None: left unset."""
        return SPEC_MAX_RUNNING_REQUESTS if self.handler not in (None, "_handle_uno") else None

    @property
    def resolver_rule(self) -> int | None:
        """The fixed resolver's rule for the draft worker when its own pool is not an SWA pool (None: no draft).

        Rule 2 returns no pool (the draft owns one, addressed with full-pool ids); rule 3 returns the
        allocator's pool, the one the draft reads: SGLang tests ``is_frozen_kv_mtp()`` for it.
        """
        if not self.draft_model:
            return None
        return 3 if self.reads_target_pool else 2


# kv_cache_hook.py: _SPEC_MHA_AUDITED_BACKENDS, and _SPEC_VERIFY_AUDITED_BACKENDS with fa4 (DSPARK's).
_MHA_AUDITED = ("fa3", "flashinfer", "triton", "trtllm_mha")
_VERIFY_AUDITED_FA4 = ("cutedsl_mla", "fa3", "fa4", "flashinfer", "flashmla", "triton", "trtllm_mla")
#: What the kit models of the DFLASH family, whose draft worker it does not mirror.
_DFLASH_MODELLED = ("its draft's layers and own full pool priced in the target's budget (swa_kit.launch.pool_sizing "
                    "dflash_draft_layers) or fused into a unified target's entries (swa_kit.launch.unified_memory), "
                    "its draft backend (swa_kit.launch.drafts), its start-up rules (check_surface) and its target "
                    "routes as EAGLE's; its draft block on the draft backend is not planned")
#: Every backend: --enable-unified-memory without speculation checks none.
_ANY_BACKEND = ()


class SpeculativeAlgorithm(Enum):
    """SGLang 0.5.23's speculative algorithms the kit reads, each with its :class:`Traits`."""

    traits: Traits

    def __new__(cls, traits: Traits) -> SpeculativeAlgorithm:
        member = object.__new__(cls)
        member._value_ = len(cls.__members__) + 1  # numbered in order, as SGLang's auto() does
        member.traits = traits
        return member

    NONE = Traits(kit_plans=True, unified_memory_backends=_ANY_BACKEND)
    EAGLE = Traits(draft_model=True, owns_kv_pool=True, sglang_is_eagle=True, handler=EAGLE_FAMILY_HANDLER,
                   mtp_draft_from_target=True, kit_plans=True, unified_memory_backends=_MHA_AUDITED,
                   unified_fuses_draft=True, unified_refuses_unfused=True)
    EAGLE3 = Traits(draft_model=True, owns_kv_pool=True, sglang_is_eagle=True, handler=EAGLE_FAMILY_HANDLER,
                    kit_plans=True, unified_memory_backends=_MHA_AUDITED, unified_fuses_draft=True,
                    unified_refuses_unfused=True)
    STANDALONE = Traits(draft_model=True, owns_kv_pool=True, handler=EAGLE_FAMILY_HANDLER, kit_plans=True)
    FROZEN_KV_MTP = Traits(draft_model=True, reads_target_pool=True, sglang_is_eagle=True,
                           handler="_handle_frozen_kv_mtp", single_chain=True, kit_plans=True)
    NGRAM = Traits(handler=NGRAM_HANDLER)
    DFLASH = Traits(draft_model=True, owns_kv_pool=True, handler="_handle_dflash", topk_forced_to_one=True,
                    devices=("cuda", "npu", "xpu"), unified_memory_backends=_MHA_AUDITED, unified_fuses_draft=True,
                    dflash_family=True, target_routes_as="eagle", modelled_apart=_DFLASH_MODELLED)
    DSPARK = Traits(draft_model=True, owns_kv_pool=True, handler="_handle_dspark", devices=("cuda", "npu", "xpu"),
                    unified_memory_backends=_VERIFY_AUDITED_FA4, unified_fuses_draft=True, dflash_family=True,
                    target_routes_as="eagle",
                    modelled_apart=_DFLASH_MODELLED + "; its markov_rank rule (check_surface)")
    UNO = Traits(handler="_handle_uno", devices=("cuda",),
                 modelled_apart="no draft model and no draft pool (the target with a LoRA: swa_kit.launch.drafts); "
                                "its start-up rules (check_surface); its routes run on fa3 only, which the kit does "
                                "not route")

    @classmethod
    def from_string(cls, name: str | None) -> SpeculativeAlgorithm:
        """The member named ``name`` in any case (None: NONE), an alias's member, or a clear error."""
        if name is None:
            return cls.NONE
        upper = str(name).upper()
        if upper in cls.__members__:
            return cls[upper]
        if upper in ALIASES:
            return ALIASES[upper]
        raise ModelConfigError(f"unknown speculative algorithm {name!r}; known: {', '.join(LAUNCH_NAMES)}")

    def is_none(self) -> bool:
        return self is SpeculativeAlgorithm.NONE

    def is_some(self) -> bool:
        return self is not SpeculativeAlgorithm.NONE

    is_speculative = is_some

    def is_eagle(self) -> bool:
        # As in SGLang 0.5.23: FROZEN_KV_MTP counts as EAGLE (it reuses EAGLE's scheduling),
        # STANDALONE does not. Memory wiring must therefore never key off is_eagle().
        return self.traits.sglang_is_eagle

    def is_eagle3(self) -> bool:
        return self is SpeculativeAlgorithm.EAGLE3

    def is_standalone(self) -> bool:
        return self is SpeculativeAlgorithm.STANDALONE

    def is_frozen_kv_mtp(self) -> bool:
        return self is SpeculativeAlgorithm.FROZEN_KV_MTP

    def draft_owns_kv(self) -> bool:
        """Whether the draft writes KV into a pool of its own (every drafting algorithm but FROZEN_KV_MTP)."""
        return self.traits.owns_kv_pool


def decode_evicts_swa(algorithm: SpeculativeAlgorithm, sglang_version: str) -> bool:
    """Whether decode preparation frees out-of-window SWA slots (``ScheduleBatch.maybe_evict_swa``).

    SGLang 0.5.23 calls it on every path ``speculative/spec_utils.py spec_prepare_for_decode`` routes to (EAGLE's
    and NGRAM's ``eagle_prepare_for_decode``, UNO's, and the DFLASH family's ``DFlashDraftInputV2.
    prepare_for_decode``, which also advances ``decode_batch_idx``, the counter the eviction gate reads), and so
    does plain decode (``mem_cache/allocation.py``). ``before-34924`` is 0.5.23 without that change to the DFLASH
    family's preparation, the change PR #34924 proposed.
    """
    return has_fix(sglang_version, 34924) or not algorithm.traits.dflash_family


#: Other spellings ``--speculative-algorithm`` takes, and the algorithm each one is.
ALIASES: dict[str, SpeculativeAlgorithm] = {"NEXTN": SpeculativeAlgorithm.EAGLE, "MTP": SpeculativeAlgorithm.EAGLE}
#: What ``--speculative-algorithm`` accepts, as SGLang spells it.
LAUNCH_NAMES: tuple[str, ...] = tuple(a.name for a in SpeculativeAlgorithm if a.is_some()) + tuple(ALIASES)
FROZEN_KV_DUMMY_POOL_SIZE = 64  # SGLang's FrozenKVMTPDraftWorker: max_total_num_tokens=64 ("Dummy value")
#: The algorithms the kit mirrors and plans, as the CLI and :func:`swa_kit.engine.routing.plan` spell them.
PLANNED: tuple[str, ...] = tuple(a.name.lower() for a in SpeculativeAlgorithm if a.traits.kit_plans)


def planned(algorithm: SpeculativeAlgorithm | str | None) -> SpeculativeAlgorithm:
    """``algorithm`` (a member or any spelling) if the kit mirrors its workers and plans its routes; else an error."""
    if not isinstance(algorithm, SpeculativeAlgorithm):
        algorithm = SpeculativeAlgorithm.from_string(algorithm)
    if not algorithm.traits.kit_plans:
        raise ModelConfigError(f"the kit does not mirror {algorithm.name}'s workers or plan its routes; it does for "
                               f"{', '.join(PLANNED)}")
    return algorithm


#: vLLM 0.34's ``--speculative-config`` methods, and whether the drafter reads the target's hidden states
#: (``SpeculatorConfig.uses_target_hidden_states``, vllm/v1/worker/gpu/spec_decode/*/config.py). vLLM's own list:
#: its names and grouping differ from SGLang's algorithms above.
VLLM_SPEC_METHODS: dict[str, bool] = {"eagle": True, "eagle3": True, "mtp": True, "dflash": True, "dspark": True,
                                      "ngram": False, "ngram_gpu": False, "suffix": False, "draft_model": False}
#: vLLM methods with no draft model, so no drafter layers to place (a lookup of earlier tokens).
VLLM_NO_DRAFT_MODEL = ("ngram", "ngram_gpu", "suffix")
#: vLLM methods whose speculator writes the drafter's context KV outside attention (``DFlashSpeculator`` and its
#: subclass ``DSparkSpeculator``, vllm/v1/worker/gpu/spec_decode/dflash/, dspark/).
VLLM_CONTEXT_KV_WRITERS = ("dflash", "dspark")
#: The method vLLM runs Gemma-4's assistant drafter under (``SpeculativeConfig.use_gemma4_mtp``).
VLLM_GEMMA4_DRAFT_METHOD = "mtp"
#: SGLang's algorithm (or alias) -> vLLM's method of the same meaning (``swa-kit audit --engine both``). Gemma-4's
#: assistant drafter is FROZEN_KV_MTP in SGLang and ``mtp`` in vLLM (vllm/model_executor/models/gemma4_mtp.py); a
#: model's own MTP layers are NEXTN (EAGLE) in SGLang and ``mtp`` in vLLM. UNO has no vLLM method.
SGLANG_TO_VLLM_METHOD: dict[str, str] = {
    "EAGLE": "eagle", "EAGLE3": "eagle3", "STANDALONE": "draft_model", "NGRAM": "ngram", "DFLASH": "dflash",
    "DSPARK": "dspark", "FROZEN_KV_MTP": "mtp", "NEXTN": "mtp", "MTP": "mtp"}


def sglang_algorithm_for(method: str, gemma4: bool, mtp_layers: bool) -> str | None:
    """vLLM's ``method`` as SGLang's algorithm (None: none of that meaning); ``mtp`` is Gemma-4's assistant drafter
    on a Gemma-4 target (FROZEN_KV_MTP), else the model's own MTP layers (NEXTN) where it has them."""
    if method == VLLM_GEMMA4_DRAFT_METHOD:
        return SpeculativeAlgorithm.FROZEN_KV_MTP.name if gemma4 else "NEXTN" if mtp_layers else None
    named = [a for a, m in SGLANG_TO_VLLM_METHOD.items() if m == method]
    return named[0] if named else None
