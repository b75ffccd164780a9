"""The draft worker of a speculative launch: the layers it runs and the pool it owns or reads.

SGLang 0.5.23, per algorithm (``speculative/``, ``model_executor/pool_configurator.py``,
``configs/model_config.py``):

* FROZEN_KV_MTP: a 64-token dummy pool; the drafter writes no KV and reads the target's (its layers
  borrow the target's last sliding and last full layer caches).
* EAGLE / EAGLE3 / STANDALONE / MTP / NEXTN: the draft shares ``req_to_token`` and the allocator and
  owns a KV pool for its own layers. When the draft's own architecture is hybrid-SWA (MiMoV2MTP,
  Step3p5MTP, DeepSeek-V4 NextN, a Gemma-4 standalone draft; ``is_hybrid_swa_model``) that pool is an
  SWA pool (``eagle_draft_swa_num_layers``), and the fixed resolver returns it.
* The draft's layout comes from its config: ``--speculative-draft-model-path`` (here
  ``--draft-hf-config``), or for MTP / NextN the target's config rewritten to the draft architecture
  (``ModelConfig`` for ``is_draft_model``: MiMoV2FlashForCausalLM -> MiMoV2MTP, one sliding layer). Without a
  draft path SGLang reads the target's own config as the draft's (``ModelConfig.from_server_args``).
* ``--speculative-draft-window-size N``: Llama EAGLE-3 drafts set ``sliding_window_size = N`` on every
  draft layer (``models/llama_eagle3.py``); other drafts keep their layers' own windows, and only the Triton /
  FlashInfer draft-decode path honours the flag (``speculative/spec_utils.py resolve_draft_decode_window``), with
  ``--speculative-draft-sink-size S``: each draft-decode step reads the first S prefix tokens and the most recent
  N (``kernels/ops/speculative/cache_locs.py generate_draft_decode_kv_indices``, ``cap = window + sink``). Neither
  changes a pool: every token keeps its draft slot, only the indices the step reads are cut.
* DFLASH / DSPARK: a draft model with a full KV pool of its own (one slot per target token), priced by its own
  geometry; it runs one block forward per step on its own draft backend (``backend``), which is never aiter.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from swa_kit.models.configs import ARCHITECTURES, ModelLayout
from swa_kit.window import Window, to_keys

#: Drafts whose model class sets ``--speculative-draft-window-size`` on every layer (``models/llama_eagle3.py``);
#: any other draft's layers keep their own windows: the flag then cuts only the Triton / FlashInfer draft decode's
#: key indices (with the sink) and DFLASH's compact draft cache, and aiter's draft decode ignores it.
OWN_WINDOW_DRAFTS = ("LlamaForCausalLMEagle3",)
#: How a draft layout read from no draft config is labelled (the audit says so in an info finding).
NO_DRAFT_CONFIG = "NO DRAFT CONFIG"


@dataclass(frozen=True)
class DraftPool:
    """What the draft worker owns or reads, and where the kit got its layout."""

    algorithm: str
    pool: str  # "none" | "dummy (64 tokens), reads the target's pool" | "own full pool" | "own SWA pool"
    layout: ModelLayout | None
    layout_from: str
    window_size: int | None  # --speculative-draft-window-size (layer windows of OWN_WINDOW_DRAFTS only)
    source: str
    backend: str | None = None  # a DFLASH-family draft's own attention backend (None: the target's, as EAGLE's)
    sink_size: int = 0  # --speculative-draft-sink-size where the draft decode honours it (0: none)


def _mtp_draft(target: ModelLayout) -> ModelLayout | None:
    """The target's config rewritten to its MTP draft architecture: one layer shaped like its sliding kind."""
    draft_arch = ARCHITECTURES[target.architecture].mtp_draft
    sliding = next((k for k in target.kinds.values() if k.attention == "sliding"), None)
    if draft_arch is None or sliding is None:
        return None
    return dataclasses.replace(target, name=f"{target.name}-mtp", architecture=draft_arch,
                               kinds={"sliding": sliding}, layer_types=("sliding",),
                               sglang_hybrid_swa_pool=ARCHITECTURES[draft_arch].hybrid_swa)


def with_window(layout: ModelLayout, window: int) -> ModelLayout:
    """``--speculative-draft-window-size``: every draft layer gets ``sliding_window_size = window``."""
    kinds = {name: dataclasses.replace(kind, attention="sliding", window=Window(to_keys("sglang", window)),
                                       window_field="--speculative-draft-window-size", window_value=window,
                                       sliding_window_size=window)
             for name, kind in layout.kinds.items()}
    return dataclasses.replace(layout, kinds=kinds, sglang_hybrid_swa_pool=False)


def default_draft_layout(target: ModelLayout, mtp_from_target: bool, window: int | None = None,
                         draft: ModelLayout | None = None) -> tuple[ModelLayout, str]:
    """The layout of an EAGLE-family draft, and where it came from.

    ``draft`` (the draft's own config) wins; then, where the algorithm takes its draft from the target
    (``mtp_from_target``: EAGLE and its aliases, the algorithm registry's ``mtp_draft_from_target``), the MTP
    rewrite of the target's architecture; else the target's own config, as SGLang reads it without a draft path
    (labelled :data:`NO_DRAFT_CONFIG`). ``window`` is ``--speculative-draft-window-size``, set on the layers of the
    drafts in :data:`OWN_WINDOW_DRAFTS` only.
    """
    if draft is not None:
        layout, origin = draft, f"--draft-hf-config ({draft.architecture})"
    elif mtp_from_target and (mtp := _mtp_draft(target)) is not None:
        layout = mtp
        origin = (f"the target's config rewritten to {layout.architecture} (sglang 0.5.23 configs/model_config.py, "
                  "is_draft_model)")
    else:  # ModelConfig.from_server_args(model_path=None) falls back to the target's model_path
        layout = target
        origin = (f"{NO_DRAFT_CONFIG}: SGLang's draft worker reads the target's own config ({target.architecture}; "
                  "configs/model_config.py from_server_args: model_path or the target's), so the draft runs every "
                  "target layer; give --draft-hf-config with the config --speculative-draft-model-path points at")
    if window is not None and layout.architecture in OWN_WINDOW_DRAFTS and not layout.sglang_hybrid_swa_pool:
        layout = with_window(layout, window)
    return layout, origin
