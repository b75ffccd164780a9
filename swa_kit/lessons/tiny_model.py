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
* the *serving* forward (:class:`swa_kit.lessons.serving.Server`) writes K/V into the kit's pools and
  reads it back through an :class:`~swa_kit.attention.batch.AttentionBatch` built from
  ``req_to_token`` and run by the dispatch's chosen path. :meth:`Block.q`, :meth:`Block.kv`
  and :meth:`Block.finish` are the shared pieces.

Weights are loaded with :func:`load_models` from ``data/tiny_model/`` (made by
``scripts/train_tiny_model.py``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from swa_kit.errors import ModelConfigError
from swa_kit.resources import data_path
from swa_kit.window import Window

DATA_DIR = data_path("tiny_model")
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
    def from_json(cls, raw: dict[str, Any]) -> TinyConfig:
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
        if self.wk is None or self.wv is None:
            raise ModelConfigError("this block has no K/V projections: an MTP draft block reads the target's K/V")
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
        for i, block in enumerate(cast("list[Block]", self.layers)):  # nn.ModuleList yields untyped modules
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
        for block, layer_id in zip(cast("list[Block]", self.blocks), self.source_layers):
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

    def to(self, dtype: torch.dtype) -> TinyModels:
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
