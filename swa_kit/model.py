"""A tiny hybrid-SWA decoder and its two drafts, with a dense forward and a serving forward.

The target is a character-level decoder: RMSNorm, GQA attention with RoPE, SwiGLU MLP, a
configurable pattern of ``sliding`` and ``full`` layers, each sliding layer with its own
window (in the kit's one unit, :class:`~swa_kit.window.Window` keys). Two drafts ride on it:

* :class:`EagleDraft` (EAGLE-style): token embedding + the target's last hidden state ->
  ``fc`` -> one decoder layer of its own (a sliding layer, with its own KV pool in serving)
  -> the target's final norm and head. It predicts the next token and the next hidden state.
* :class:`MtpDraft` (FROZEN_KV MTP-style, after Gemma-4's assistant): token embedding + a
  recurrent hidden state -> ``pre_projection`` -> query-only attention blocks that read the
  target's K/V of its last sliding and last full layer -> ``post_projection``. It writes no
  KV. Its rotary phase stays at the last position the target wrote (as SGLang's
  ``set_frozen_kv_positions`` does), so every draft step queries the same keys.

Two forwards share every projection and differ only in attention:

* the *dense* forward (:meth:`TinyModel.dense_forward`, used for training and as the oracle)
  computes attention with an explicit ``[T, T]`` mask from :meth:`Window.attends`;
* the *serving* forward (:mod:`swa_kit.spec`'s runner) writes K/V into the kit's pools and
  reads it back through an :class:`~swa_kit.attention.batch.AttentionBatch` built from
  ``req_to_token`` and run by the dispatch's chosen path. :meth:`TinyModel.qkv`,
  :meth:`TinyModel.finish_layer` and friends are the shared pieces.

Weights are loaded with :func:`load_models` from ``data/tiny_model/`` (made by
``scripts/train_tiny_model.py``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from swa_kit.attention.backends import get_backend, run_path
from swa_kit.attention.batch import AttentionBatch
from swa_kit.attention.reference import reference_attention
from swa_kit.configs import ModelLayout, parse_hf_config
from swa_kit.dispatch import LayerPlan, Plan, plan
from swa_kit.errors import DispatchGuardError, ModelConfigError, PoolExhaustedError
from swa_kit.eviction import ReqKV, free_swa_out_of_window_slots
from swa_kit.masks import tree_depths, verify_tree_mask
from swa_kit.pools import KVWriteLoc
from swa_kit.resolver import RESOLVERS, uses_sliding_window_kv_pool
from swa_kit.window import Window
from swa_kit.workers import SpeculativeAlgorithm, WorkerLayout, build_workers

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "tiny_model"
CHECKPOINT = "checkpoint.pt"
LAYER_TYPES = ("sliding", "full")


@dataclass(frozen=True)
class TinyConfig:
    """Shapes of the target and its drafts; windows are keys attended, counting the query."""

    vocab: str
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16
    d_ff: int = 128
    layer_types: tuple[str, ...] = ("sliding", "full", "sliding", "full")
    windows: tuple[int | None, ...] = (16, None, 16, None)
    rope_theta: float = 10000.0
    eagle_window: int = 16
    mtp_steps: int = 3  # draft steps the MTP head was trained to unroll

    def __post_init__(self) -> None:
        if len(self.layer_types) != len(self.windows):
            raise ModelConfigError(
                f"layer_types has {len(self.layer_types)} entries but windows has {len(self.windows)}; "
                "give one window per layer (None for full layers)"
            )
        for i, (kind, keys) in enumerate(zip(self.layer_types, self.windows)):
            if kind not in LAYER_TYPES:
                raise ModelConfigError(f"layer {i}: type {kind!r} is not one of {LAYER_TYPES}")
            if (kind == "sliding") != (keys is not None):
                raise ModelConfigError(
                    f"layer {i}: a {kind} layer needs window {'a number of keys' if kind == 'sliding' else 'None'}, "
                    f"got {keys!r}"
                )
            Window(keys)
        if "sliding" not in self.layer_types or "full" not in self.layer_types:
            raise ModelConfigError(
                f"layer_types {self.layer_types} must hold at least one sliding and one full layer "
                "(the MTP draft reads the last of each)"
            )
        if self.n_heads % self.n_kv_heads:
            raise ModelConfigError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")

    @property
    def n_layers(self) -> int:
        return len(self.layer_types)

    @property
    def sliding_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "sliding"]

    @property
    def full_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "full"]

    @property
    def max_window(self) -> int:
        """The widest sliding window: what out-of-window eviction must keep."""
        return max(w for w in self.windows if w is not None)

    @property
    def mtp_source_layers(self) -> tuple[int, int]:
        """Target layers whose K/V the MTP draft reads: (last sliding, last full)."""
        return self.sliding_layers[-1], self.full_layers[-1]

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - set(self.vocab))
        if unknown:
            raise ModelConfigError(f"characters {unknown} are not in the model's vocabulary {self.vocab!r}")
        return [self.vocab.index(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] for i in ids)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "TinyConfig":
        raw = dict(raw)
        raw["layer_types"] = tuple(raw["layer_types"])
        raw["windows"] = tuple(raw["windows"])
        return cls(**raw)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate ``x [..., T, H, D]`` by absolute ``positions [..., T]`` (half-split RoPE)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float64, device=x.device) / half)
    angles = positions.to(torch.float64)[..., None] * freqs  # [..., T, half]
    cos, sin = angles.cos().to(x.dtype)[..., None, :], angles.sin().to(x.dtype)[..., None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: int | None) -> torch.Tensor:
    """Causal (windowed) attention over ``[B, T, H, D]`` with an explicit mask: the training path."""
    t = q.shape[1]
    pos = torch.arange(t, device=q.device)
    allowed = Window(keys).attends(pos[:, None], pos[None, :])  # [T, T]
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v)


class Block(nn.Module):
    """One pre-norm decoder layer; ``kv=False`` makes it query-only (the MTP draft's blocks)."""

    def __init__(self, cfg: TinyConfig, kv: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        d, hq, hkv, hd = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.attn_norm = RMSNorm(d)
        self.wq = nn.Linear(d, hq * hd, bias=False)
        self.wk = nn.Linear(d, hkv * hd, bias=False) if kv else None
        self.wv = nn.Linear(d, hkv * hd, bias=False) if kv else None
        self.wo = nn.Linear(hq * hd, d, bias=False)
        self.mlp_norm = RMSNorm(d)
        self.w_gate = nn.Linear(d, cfg.d_ff, bias=False)
        self.w_up = nn.Linear(d, cfg.d_ff, bias=False)
        self.w_down = nn.Linear(cfg.d_ff, d, bias=False)

    def q(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotated queries ``[..., T, Hq, D]`` of hidden ``x [..., T, d]``."""
        h = self.attn_norm(x)
        q = self.wq(h).unflatten(-1, (self.cfg.n_heads, self.cfg.head_dim))
        return rope(q, positions, self.cfg.rope_theta)

    def kv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated keys and values ``[..., T, Hkv, D]``: what serving writes into a pool."""
        h = self.attn_norm(x)
        k = self.wk(h).unflatten(-1, (self.cfg.n_kv_heads, self.cfg.head_dim))
        v = self.wv(h).unflatten(-1, (self.cfg.n_kv_heads, self.cfg.head_dim))
        return rope(k, positions, self.cfg.rope_theta), v

    def finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Residual update from the attention output ``[..., T, Hq, D]``, then the MLP."""
        x = x + self.wo(attn.flatten(-2))
        h = self.mlp_norm(x)
        return x + self.w_down(nn.functional.silu(self.w_gate(h)) * self.w_up(h))


class TinyModel(nn.Module):
    """The target: embeddings, ``cfg.n_layers`` blocks, final norm, head tied to the embeddings."""

    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(len(cfg.vocab), cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits from pre-norm hidden states (shared by both drafts)."""
        return self.norm(hidden) @ self.embed.weight.T

    def dense_forward(
        self, tokens: torch.Tensor, window_override: dict[int, int | None] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, dict[int, tuple[torch.Tensor, torch.Tensor]]]:
        """Dense masked forward of ``tokens [B, T]`` from position 0.

        Returns logits ``[B, T, V]``, last hidden (pre-norm) ``[B, T, d]`` and every layer's
        rotated K/V (what the MTP draft reads). ``window_override`` replaces layers' windows
        (the guard experiment's oracle).
        """
        windows = dict(enumerate(self.cfg.windows)) | (window_override or {})
        pos = torch.arange(tokens.shape[1], device=tokens.device).expand(tokens.shape)
        x = self.embed(tokens)
        kvs = {}
        for i, block in enumerate(self.layers):
            k, v = block.kv(x, pos)
            kvs[i] = (k, v)
            x = block.finish(x, dense_attention(block.q(x, pos), k, v, windows[i]))
        return self.logits(x), x, kvs


class EagleDraft(nn.Module):
    """EAGLE-style draft: one sliding decoder layer of its own over ``fc([embed; feature])``."""

    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(2 * cfg.d_model, cfg.d_model, bias=False)
        self.layer = Block(cfg)

    def inputs(self, target: TinyModel, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """The layer input at position p from token x_p and the feature of position p - 1."""
        return self.fc(torch.cat([target.embed(tokens), features], dim=-1))

    def dense_forward(self, target: TinyModel, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Draft hidden states ``[B, T, d]`` (predicting features of the same positions)."""
        x = self.inputs(target, tokens, features)
        pos = torch.arange(tokens.shape[1], device=tokens.device).expand(tokens.shape)
        k, v = self.layer.kv(x, pos)
        return self.layer.finish(x, dense_attention(self.layer.q(x, pos), k, v, self.cfg.eagle_window))


class MtpDraft(nn.Module):
    """FROZEN_KV MTP-style head: query-only blocks over the target's last sliding and full K/V."""

    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.pre_projection = nn.Linear(2 * cfg.d_model, cfg.d_model, bias=False)
        self.blocks = nn.ModuleList(Block(cfg, kv=False) for _ in cfg.mtp_source_layers)
        self.post_projection = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    @property
    def source_layers(self) -> tuple[int, ...]:
        """Target layer whose K/V each block reads (SGLang binds them the same way)."""
        return self.cfg.mtp_source_layers

    def inputs(self, target: TinyModel, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        return self.pre_projection(torch.cat([target.embed(tokens), hidden], dim=-1))

    def dense_forward(
        self,
        target: TinyModel,
        tokens: torch.Tensor,
        hidden: torch.Tensor,
        target_kvs: dict[int, tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        """One draft step at every position t: query at t over the target's keys 0..t.

        ``tokens [B, T]`` is the input token of each row (x_{t+1+j} at step j), ``hidden`` the
        recurrent state; returns the next recurrent state (post-projection, pre-norm).
        """
        x = self.inputs(target, tokens, hidden)
        pos = torch.arange(tokens.shape[1], device=tokens.device).expand(tokens.shape)
        for block, layer_id in zip(self.blocks, self.source_layers):
            k, v = target_kvs[layer_id]
            x = block.finish(x, dense_attention(block.q(x, pos), k, v, self.cfg.windows[layer_id]))
        return self.post_projection(x)


@dataclass
class TinyModels:
    """The trained target and both drafts, plus where they came from."""

    cfg: TinyConfig
    target: TinyModel
    eagle: EagleDraft
    mtp: MtpDraft
    meta: dict[str, Any] = field(default_factory=dict)

    def to(self, dtype: torch.dtype) -> "TinyModels":
        for m in (self.target, self.eagle, self.mtp):
            m.to(dtype)
        return self


def build_models(cfg: TinyConfig) -> TinyModels:
    """Fresh, randomly initialised models (the training script's starting point)."""
    return TinyModels(cfg, TinyModel(cfg), EagleDraft(cfg), MtpDraft(cfg))


def save_models(models: TinyModels, directory: Path = DATA_DIR) -> Path:
    """Write a float32 checkpoint with its config and metadata."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CHECKPOINT
    state = {
        "config": models.cfg.to_json(),
        "meta": models.meta,
        "target": {k: v.float() for k, v in models.target.state_dict().items()},
        "eagle": {k: v.float() for k, v in models.eagle.state_dict().items()},
        "mtp": {k: v.float() for k, v in models.mtp.state_dict().items()},
    }
    torch.save(state, path)
    (directory / "config.json").write_text(json.dumps(state["config"] | {"meta": models.meta}, indent=2) + "\n")
    return path


def load_models(directory: Path = DATA_DIR, dtype: torch.dtype = torch.float64) -> TinyModels:
    """Load the shipped checkpoint (float64 by default: exact greedy comparisons need no ties)."""
    path = Path(directory) / CHECKPOINT
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}; run `python scripts/train_tiny_model.py` to make one")
    state = torch.load(path, map_location="cpu", weights_only=True)
    models = build_models(TinyConfig.from_json(state["config"]))
    models.target.load_state_dict(state["target"])
    models.eagle.load_state_dict(state["eagle"])
    models.mtp.load_state_dict(state["mtp"])
    models.meta = state["meta"]
    for m in (models.target, models.eagle, models.mtp):
        m.eval().requires_grad_(False)
    return models.to(dtype)


# -- serving: the same weights, attention through the kit's pools, resolver and dispatch --------------------


def tiny_model_spec(cfg: TinyConfig) -> ModelLayout:
    """The tiny model as a :class:`~swa_kit.configs.ModelLayout`, so :func:`swa_kit.dispatch.plan` can route it.

    It goes through the same parser as every Hugging Face config: a ``layer_types``-style config.
    """
    windows = {w for w in cfg.windows if w is not None}
    if len(windows) != 1:
        raise ModelConfigError(
            f"sliding layers have windows {sorted(windows)}; the kit's pools and dispatch take one window per "
            "model (one SWA sub-pool, one eviction boundary): give every sliding layer the same window"
        )
    origin = "swa_kit.model.TinyConfig (data/tiny_model/config.json)"
    return parse_hf_config({
        "architectures": ["SwaKitTinyForCausalLM"], "model_type": "swa_kit_tiny", "num_hidden_layers": cfg.n_layers,
        "layer_types": [f"{t}_attention" for t in cfg.layer_types], "sliding_window": windows.pop(),
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
        "dtype": "float32",
    }, where=origin, name="swa-kit-tiny", display_name="swa_kit tiny hybrid-SWA model", hf_repo="none (data/tiny_model)",
        sources={"config": origin})


def tiny_eagle_spec(cfg: TinyConfig) -> ModelLayout:
    """The tiny EAGLE draft: one sliding layer (``eagle_window`` keys) in a full pool of its own."""
    origin = "swa_kit.model.TinyConfig.eagle_window (data/tiny_model/config.json)"
    return parse_hf_config({
        "architectures": ["SwaKitTinyEagleForCausalLM"], "model_type": "swa_kit_tiny_eagle", "num_hidden_layers": 1,
        "layer_types": ["sliding_attention"], "sliding_window": cfg.eagle_window, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "dtype": "float32",
    }, where=origin, name="swa-kit-tiny-eagle", display_name="swa_kit tiny EAGLE head", hf_repo="none",
        sources={"config": origin})


@dataclass
class Request:
    """One request's serving state: committed tokens, how far the pools hold its KV, its target hidden states."""

    row: int  # req_pool_idx: its row of req_to_token
    prompt_len: int
    tokens: list[int]  # prompt + generated; the last one has no target KV yet (the "bonus" token)
    kv_len: int = 0  # positions 0..kv_len-1 hold target KV
    draft_kv_len: int = 0  # positions 0..draft_kv_len-1 hold EAGLE-draft KV computed from true features
    evicted_upto: int = 0  # SWA slots of positions < evicted_upto are freed
    hidden: list[torch.Tensor] = field(default_factory=list)  # target last hidden per KV position

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_len:]


class Server:
    """Serve :class:`TinyModels` over real pools: target (+ EAGLE or FROZEN_KV MTP draft) wired as SGLang wires them.

    Every attention call builds an :class:`AttentionBatch` from ``req_to_token`` over the
    buffer the runner reads; sliding layers' slot ids are translated full->SWA exactly when
    the resolver under test (``resolver``: legacy / naive / fixed) says so; the layer's route
    (path, window argument, page table, guard) comes from :func:`swa_kit.dispatch.plan`, which
    must agree with the resolver about the page table. Paths that honour a window run as the
    float64 reference with the layer's window (the CPU stand-in for the planned kernel); a path
    that declares no window runs itself (its documented semantics), which is what the guard
    experiment needs: ``layer_sites={layer: "decode.paged"}`` forces a target layer onto that call site
    in the modes that reach it. With ``enforce_guards`` a refused route raises
    :class:`~swa_kit.errors.DispatchGuardError`; without, the refusal is recorded in
    :attr:`guards_seen` and the route runs, as SGLang would run it.
    """

    def __init__(self, models: TinyModels, algorithm: str = "none", resolver: str = "fixed", *,
                 max_requests: int = 4, max_context_len: int = 256, size: int | None = None,
                 size_swa: int | None = None, topk: int = 1, env: dict[str, str] | None = None,
                 enforce_guards: bool = True, layer_sites: dict[int, str] | None = None,
                 sglang_windows: bool = False) -> None:
        if resolver not in RESOLVERS:
            raise ModelConfigError(f"unknown resolver {resolver!r}; known: {', '.join(RESOLVERS)}")
        self.models, self.cfg = models, models.cfg
        self.spec = tiny_model_spec(self.cfg)
        self.window = self.cfg.max_window
        self.algorithm, self.resolver, self.topk = algorithm, resolver, topk
        self.env = dict(env or {})
        self.enforce_guards = enforce_guards
        # False: a window-honouring path attends the layer's intended window (the model as trained).
        # True: it attends what SGLang's window argument really makes it attend (the plan's
        # effective_keys; one key short at the unified sites).
        self.sglang_windows = sglang_windows
        self.layer_sites = dict(layer_sites or {})
        self.guards_seen: list[str] = []
        # Every (path, tier, device) that computed an attention call, in first-use order.
        self.computed_by: dict[tuple[str, str, str], None] = {}
        draft_types = ("sliding",) if algorithm != "frozen_kv_mtp" else tuple(
            self.cfg.layer_types[i] for i in self.cfg.mtp_source_layers)
        layout = WorkerLayout("swa-kit-tiny", self.cfg.layer_types, self.window, True, draft_types)
        size = size or max_requests * max_context_len
        self.workers = build_workers(
            layout, SpeculativeAlgorithm.from_string(algorithm), size=size,
            size_swa=size_swa or max_requests * 2 * (self.window + 8), max_requests=max_requests,
            max_context_len=max_context_len, head_num=self.cfg.n_kv_heads, head_dim=self.cfg.head_dim,
            dtype=torch.float64)
        self.req_to_token = self.workers.target.req_to_token_pool.req_to_token
        self._plans: dict[tuple[str, str], Plan] = {}

    # -- routes ------------------------------------------------------------------------------------------

    def plan(self, worker: str, mode: str) -> Plan:
        """The dispatch plan of one worker in one forward mode (cached; guards recorded, not raised here)."""
        key = (worker, mode)
        if key not in self._plans:
            spec = "none" if self.algorithm == "none" else self.algorithm
            draft = tiny_eagle_spec(self.cfg) if worker == "draft" and self.algorithm == "eagle" else None
            self._plans[key] = plan(self.spec, mode, spec=spec, topk=self.topk if mode == "verify" else 1,
                                    env=self.env, worker=worker, resolver=self.resolver, strict=False,
                                    draft_model=draft)
        return self._plans[key]

    def _entry(self, worker: str, mode: str, layer_id: int) -> LayerPlan:
        entry = self.plan(worker, mode).layer(layer_id)
        site = self.layer_sites.get(layer_id) if worker == "target" else None
        if site is None:
            return entry
        # A forced route (the guard experiment): the layer at the call site SGLang picks when unified
        # attention is off (a one-pool model, default env), judged by that site's guard.
        alt = plan(replace(self.spec, sglang_hybrid_swa_pool=False), mode, worker=worker, strict=False,
                   env={"SGLANG_USE_AITER_UNIFIED_ATTN": "0"}).layer(layer_id)
        if alt.site != site:  # this mode never reaches that call site (e.g. prefill for decode.paged)
            return entry
        return replace(alt, buffer=entry.buffer, page_table=entry.page_table)

    def translates(self, worker: str, layer_sliding: bool) -> Any:
        """The pool whose full->SWA mapping this worker's sliding layer reads through, or None (resolver's call)."""
        runner = self.workers.runner(worker)
        resolved = RESOLVERS[self.resolver](runner)
        return resolved if layer_sliding and uses_sliding_window_kv_pool(resolved) else None

    def attend(self, worker: str, mode: str, layer_id: int, sliding: bool, buffers: tuple[torch.Tensor, torch.Tensor],
               q: torch.Tensor, reqs: list[Request], q_lens: list[int], seq_lens: list[int],
               tree_masks: list[torch.Tensor] | None = None) -> torch.Tensor:
        """One layer's attention for a batch: slots from ``req_to_token``, translated if the resolver says so."""
        entry = self._entry(worker, mode, layer_id)
        pool = self.translates(worker, sliding)
        if entry.page_table != ("swa" if pool is not None else "full"):
            raise DispatchGuardError(
                f"{worker} layer {layer_id}: the {self.resolver} resolver says page table "
                f"{'swa' if pool is not None else 'full'} but dispatch planned {entry.page_table!r}")
        if entry.guard:
            if self.enforce_guards:
                raise DispatchGuardError(entry.guard)
            if entry.guard not in self.guards_seen:
                self.guards_seen.append(entry.guard)
        ids = [self.req_to_token[r.row, :n].to(torch.int64) for r, n in zip(reqs, seq_lens)]
        if pool is not None:
            ids = [pool.translate_loc_from_full_to_swa(i) for i in ids]
        batch = AttentionBatch(
            q=q, k_buffer=buffers[0], v_buffer=buffers[1],
            qo_indptr=torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()]),
            kv_indptr=torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()]),
            kv_indices=torch.cat(ids), sm_scale=1 / math.sqrt(self.cfg.head_dim), tree_masks=tree_masks)
        if get_backend(entry.path).honours_window:
            keys = entry.effective_keys if self.sglang_windows else entry.intended_keys
            result = reference_attention(batch, keys if entry.kind == "sliding" else None)
        else:
            result = run_path(entry.path, batch, entry.window_arg)
        self.computed_by.setdefault((result.path, result.tier, result.device))
        return result.out.to(torch.float64)

    # -- slots -------------------------------------------------------------------------------------------

    def add_request(self, prompt: list[int]) -> Request:
        rows = self.workers.target.req_to_token_pool.alloc_rows(1)
        if rows is None:
            raise PoolExhaustedError("no free req_to_token row: build the Server with a larger max_requests")
        return Request(row=rows[0], prompt_len=len(prompt), tokens=list(prompt))

    def reserve(self, req: Request, start: int, count: int) -> None:
        """Allocate ``count`` slots for positions ``start..`` and record them in ``req_to_token``."""
        if start + count > self.req_to_token.shape[1]:
            raise PoolExhaustedError(f"positions up to {start + count} exceed max_context_len "
                                     f"{self.req_to_token.shape[1]}; build the Server with a larger one")
        ids = self.workers.target.token_to_kv_pool_allocator.alloc(count)
        if ids is None:
            raise PoolExhaustedError(f"the pools cannot serve {count} more slots; build the Server with a larger "
                                     "size / size_swa")
        self.req_to_token[req.row, start:start + count] = ids.to(self.req_to_token.dtype)

    def release(self, req: Request, start: int, end: int) -> None:
        """Free both sides of positions ``start..end-1`` (rejected draft tokens)."""
        if end > start:
            self.workers.target.token_to_kv_pool_allocator.free(self.req_to_token[req.row, start:end].to(torch.int64))

    def evict(self, req: Request) -> None:
        """Out-of-window eviction by the kit's one rule (:mod:`swa_kit.eviction`).

        The oldest query still to come sits at ``kv_len - 1`` (the FROZEN_KV MTP head queries
        at the last KV position), so one position counts as pending.
        """
        state = ReqKV(rid=req.row, req_pool_idx=req.row, kv_allocated_len=req.kv_len,
                      swa_evicted_seqlen=req.evicted_upto)
        free_swa_out_of_window_slots(
            state, req.kv_len, window=self.window, page_size=1, num_draft_tokens=min(1, req.kv_len),
            req_to_token_pool=self.workers.target.req_to_token_pool,
            token_to_kv_pool_allocator=self.workers.target.token_to_kv_pool_allocator,
        )
        req.evicted_upto = state.swa_evicted_seqlen

    # -- forwards ----------------------------------------------------------------------------------------

    def target_forward(self, reqs: list[Request], tokens: list[list[int]], mode: str,
                       tree_parents: list[tuple[int, ...]] | None = None) -> torch.Tensor:
        """Run the target on new tokens at positions ``kv_len..`` of each request; write their KV.

        The slots must be reserved. Returns the last hidden states ``[total_q, d]``. With
        ``tree_parents`` (tree verify) token ``i`` sits at ``kv_len + depth(i)`` and sees its ancestors only.
        """
        target, pool = self.models.target, self.workers.target.token_to_kv_pool
        q_lens = [len(t) for t in tokens]
        seq_lens = [r.kv_len + n for r, n in zip(reqs, q_lens)]
        pos, masks = [], None
        for b, (r, n) in enumerate(zip(reqs, q_lens)):
            depth = tree_depths(tree_parents[b]) if tree_parents else range(n)
            pos.append(r.kv_len + torch.tensor(list(depth)))
        if tree_parents:
            masks = [verify_tree_mask(r.kv_len, p, None) for r, p in zip(reqs, tree_parents)]
        pos_t = torch.cat(pos)
        loc = torch.cat([self.req_to_token[r.row, r.kv_len:n].to(torch.int64) for r, n in zip(reqs, seq_lens)])
        x = target.embed(torch.tensor([t for ts in tokens for t in ts]))
        for i, block in enumerate(target.layers):
            sliding = self.cfg.layer_types[i] == "sliding"
            k, v = block.kv(x, pos_t)
            swa = self.translates("target", sliding)
            pool.set_kv_buffer(i, KVWriteLoc(loc, swa_loc=swa.translate_loc_from_full_to_swa(loc) if swa else None),
                               k, v)
            out = self.attend("target", mode, i, sliding, pool.get_kv_buffer(i), block.q(x, pos_t), reqs, q_lens,
                              seq_lens, masks)
            x = block.finish(x, out)
        return x

    def eagle_forward(self, reqs: list[Request], starts: list[int], tokens: list[list[int]],
                      features: list[torch.Tensor], mode: str) -> torch.Tensor:
        """The EAGLE draft on tokens at positions ``starts[b]..``: writes its own pool at full ids, reads it back."""
        eagle, runner = self.models.eagle, self.workers.draft
        q_lens = [len(t) for t in tokens]
        seq_lens = [s + n for s, n in zip(starts, q_lens)]
        pos = torch.cat([torch.arange(s, s + n) for s, n in zip(starts, q_lens)])
        loc = torch.cat([self.req_to_token[r.row, s:e].to(torch.int64) for r, s, e in zip(reqs, starts, seq_lens)])
        x = eagle.inputs(self.models.target, torch.tensor([t for ts in tokens for t in ts]), torch.cat(features))
        k, v = eagle.layer.kv(x, pos)
        # Its own MHATokenToKVPool takes full ids as they are (SGLang's pool ignores any swa_loc).
        runner.token_to_kv_pool.set_kv_buffer(0, loc, k, v)
        out = self.attend("draft", mode, 0, True, runner.kv_pool_read.get_kv_buffer(0), eagle.layer.q(x, pos), reqs,
                          q_lens, seq_lens)
        return eagle.layer.finish(x, out)

    def mtp_step(self, reqs: list[Request], tokens: list[int], hidden: torch.Tensor) -> torch.Tensor:
        """One FROZEN_KV MTP step per request: queries at position kv_len-1 over the target's KV; writes none."""
        mtp, runner = self.models.mtp, self.workers.draft
        seq_lens = [r.kv_len for r in reqs]
        pos = torch.tensor([n - 1 for n in seq_lens])
        x = mtp.inputs(self.models.target, torch.tensor(tokens), hidden)
        for b, (block, source) in enumerate(zip(mtp.blocks, mtp.source_layers)):
            sliding = runner.layer_is_sliding(b)
            out = self.attend("draft", "draft_decode", source, sliding, runner.kv_pool_read.get_kv_buffer(source),
                              block.q(x, pos), reqs, [1] * len(reqs), seq_lens)
            x = block.finish(x, out)
        return mtp.post_projection(x)
