"""Does one key short matter for *my* model? Run it at W and at W - 1 keys and compare.

SGLang's aiter unified paths (and its Triton decode) pass ``(sws - 1, 0)`` for a layer whose
``sliding_window_size`` is ``W - 1``, so each sliding layer attends ``W - 1`` keys instead of the ``W``
the model was trained with (SGLang #32087 / #34354). Whether that changes *your* outputs depends on the
model, so this module measures it with transformers' own implementation of the model:

1. teacher-forced: one forward over the prompt at ``W`` keys and one at ``W - 1`` keys; per position,
   the largest absolute logit gap and the KL divergence ``KL(p_W || p_{W-1})`` of the next-token
   distributions, and the first position whose greedy (argmax) token differs;
2. generated: greedy decoding of ``new_tokens`` tokens from the prompt at both windows; the first
   generated token that differs.

The window is changed in place for the second run (:func:`attending`): transformers builds its
sliding-window masks from ``config.sliding_window`` on every forward (``masking_utils``) and its
attention modules keep a ``sliding_window`` attribute for the kernels that take one; both are set and
restored. Positions before ``W - 1`` attend the same keys under both windows, so their logits agree
exactly; a prompt must be longer than the window for anything to differ (checked).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from swa_kit.errors import UsageError


def text_config(model: Any) -> Any:
    """The config that holds ``sliding_window`` (multimodal models nest it under ``text_config``)."""
    config = model.config
    if getattr(config, "sliding_window", None) is None and getattr(config, "text_config", None) is not None:
        config = config.text_config
    return config


def model_window(model: Any) -> int:
    """The model's ``sliding_window`` in keys (Hugging Face counts the query itself)."""
    window = getattr(text_config(model), "sliding_window", None)
    if not isinstance(window, int) or isinstance(window, bool) or window < 2:
        raise UsageError(f"{type(model).__name__}: config.sliding_window={window!r}; comparing W and W-1 keys needs "
                         "a model with a sliding window of at least 2 keys (Gemma-2/3/4, Mistral, GPT-OSS, ...)")
    return window


@contextlib.contextmanager
def attending(model: Any, keys: int) -> Iterator[None]:
    """Run ``model`` with every sliding layer attending ``keys`` keys; restore the model's window on exit."""
    config = text_config(model)
    original = model_window(model)
    modules = [m for m in model.modules() if getattr(m, "sliding_window", None) == original]
    configs = [c for c in {id(c): c for c in (model.config, config)}.values()
               if getattr(c, "sliding_window", None) == original]
    for owner in (*configs, *modules):
        owner.sliding_window = keys
    try:
        yield
    finally:
        for owner in (*configs, *modules):
            owner.sliding_window = original


@dataclass(frozen=True)
class KeyGap:
    """What one key short does to a model's next-token predictions over one prompt."""

    model: str
    window: int  # W, the model's own window (keys, counting the query)
    prompt_tokens: int
    first_changed_position: int | None  # first prompt position whose logits differ at all
    first_argmax_position: int | None  # first prompt position whose greedy token differs
    max_logit_gap: float  # max |logit_W - logit_{W-1}| over positions and vocabulary
    max_kl: float  # max over positions of KL(p_W || p_{W-1}) in nats
    mean_kl: float  # mean over the positions at or after W - 1 (the only ones that can differ)
    argmax_agreement: float  # share of positions at or after W - 1 whose greedy token agrees
    new_tokens: int
    first_diverging_token: int | None  # index into the generated tokens where the two runs part, or None
    generated_w: list[int]
    generated_w_minus_1: list[int]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        first = "never" if self.first_diverging_token is None else f"at generated token {self.first_diverging_token}"
        changed = "none" if self.first_changed_position is None else str(self.first_changed_position)
        return (f"{self.model}: window W={self.window}, prompt of {self.prompt_tokens} tokens. "
                f"Logits first change at position {changed} (positions before W-1={self.window - 1} attend the "
                f"same keys); max |logit gap| {self.max_logit_gap:.4g}, KL(p_W || p_W-1) max {self.max_kl:.4g} / "
                f"mean {self.mean_kl:.4g} nats; greedy tokens agree at {self.argmax_agreement:.1%} of positions "
                f">= W-1. Greedy generation of {self.new_tokens} tokens diverges {first}.")


def _logits(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=input_ids, use_cache=False).logits[0].double()


def _greedy(model: Any, input_ids: torch.Tensor, new_tokens: int) -> list[int]:
    if new_tokens == 0:
        return []
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)
    return out[0, input_ids.shape[1]:].tolist()


def _first(mask: torch.Tensor) -> int | None:
    hits = mask.nonzero().flatten()
    return int(hits[0]) if hits.numel() else None


def compare_window(model: Any, input_ids: torch.Tensor | list[int], new_tokens: int = 16) -> KeyGap:
    """Compare ``model`` at its own window ``W`` and at ``W - 1`` keys over ``input_ids`` (one prompt).

    ``model`` is a transformers causal LM (``AutoModelForCausalLM``), in eval mode; the prompt must be
    longer than ``W`` tokens. ``new_tokens`` greedy tokens are generated at each window.
    """
    window = model_window(model)
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    ids = ids[None] if ids.dim() == 1 else ids
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise UsageError(f"input_ids of shape {tuple(ids.shape)}: pass one prompt, a 1-D list of token ids")
    if ids.shape[1] <= window:
        raise UsageError(f"a prompt of {ids.shape[1]} tokens never fills the window of {window} keys, so W and "
                         f"W-1 attend the same keys everywhere: pass more than {window} tokens")
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 0:
        raise UsageError(f"new_tokens={new_tokens!r}: a whole number >= 0")
    if model.training:
        raise UsageError("the model is in training mode (dropout would differ between runs): call model.eval()")
    full = _logits(model, ids)
    gen_full = _greedy(model, ids, new_tokens)
    with attending(model, window - 1):
        short = _logits(model, ids)
        gen_short = _greedy(model, ids, new_tokens)
    gap = (full - short).abs().amax(dim=-1)
    logp, logq = torch.log_softmax(full, -1), torch.log_softmax(short, -1)
    kl = (logp.exp() * (logp - logq)).sum(-1).clamp_min(0)
    argmax_differs = full.argmax(-1) != short.argmax(-1)
    late = slice(window - 1, None)
    parted = [i for i, (a, b) in enumerate(zip(gen_full, gen_short)) if a != b]
    return KeyGap(
        model=type(model).__name__, window=window, prompt_tokens=int(ids.shape[1]),
        first_changed_position=_first(gap > 0), first_argmax_position=_first(argmax_differs),
        max_logit_gap=float(gap.max()), max_kl=float(kl.max()), mean_kl=float(kl[late].mean()),
        argmax_agreement=float((~argmax_differs[late]).double().mean()), new_tokens=new_tokens,
        first_diverging_token=parted[0] if parted else None, generated_w=gen_full, generated_w_minus_1=gen_short,
    )


def tiny_model_from_config(config: Any, *, layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
                           head_dim: int = 16, vocab: int = 256, window: int | None = None, seed: int = 0) -> Any:
    """A randomly initialised causal LM shaped by a real ``config`` (transformers ``PretrainedConfig``), shrunk.

    Keeps the architecture, attention pattern and window semantics of ``config``; shrinks depth, widths
    and vocabulary (and the window, when ``window`` is given) so it runs on a CPU in seconds. No download.
    """
    from transformers import AutoModelForCausalLM

    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    fields = {**config.to_dict(), "num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": 2 * hidden,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim, "vocab_size": vocab}
    if fields.get("layer_types") is not None:  # keep the model's own pattern for the layers kept
        fields["layer_types"] = list(fields["layer_types"][:layers])
    if window is not None:
        fields["sliding_window"] = window
    shrunk = config.__class__(**fields)
    for name in ("num_local_experts", "num_experts"):
        if getattr(shrunk, name, None):
            setattr(shrunk, name, min(4, getattr(shrunk, name)))
    if getattr(shrunk, "num_experts_per_tok", None):
        shrunk.num_experts_per_tok = min(2, shrunk.num_experts_per_tok)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(shrunk).eval()
