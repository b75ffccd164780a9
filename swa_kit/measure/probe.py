"""Measure which keys an attention path really attends, and compare with the keys the layer meant.

The measurement: every query is zero, so every key it attends gets the same score and the
softmax weight ``1 / n`` over the ``n`` keys the kernel lets through; the value of key
position ``p`` is the one-hot vector ``e_p`` (positions beyond ``head_dim`` go in further
passes). The output of a query is then exactly its weight on each key position, read back
as a ``[q_len, kv_len]`` mask. GQA: every KV head holds the same values and every query
head is read separately; a head that disagrees is reported.

:func:`probe_path` runs a registered path with the window argument the kit's converter gives
for ``W`` keys (``from_keys(path.convention, W)``); :func:`probe_sglang_sites` runs each of
the aiter backend's call sites (:data:`swa_kit.engine.call_sites.SITES`) with the argument SGLang
passes for a layer whose ``sliding_window_size`` is ``W - 1``. Both measure prefill, extend,
decode and verify (a chain) wherever the path declares the mode, on the device given.

:func:`~swa_kit.attention.batch.random_paged_batch` builds the paged batches measured here:
random slots in shuffled pages, a reserved dummy page 0, and garbage in the slots of keys
that left every query's window, as an SWA pool's freed and reused slots would hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from swa_kit import budget
from swa_kit.attention.paths import PROBE_MODES, AttentionPath, all_paths, get_path
from swa_kit.attention.batch import random_paged_batch
from swa_kit.attention.reference import attended_mask
from swa_kit.engine.call_sites import SITES, CallSite, site_path
from swa_kit.errors import PathUnavailableError, UsageError
from swa_kit.window import Window, check_keys, from_keys

#: Page size for block-table paths (a GPU's Triton decode needs >= 16); token paths use 1.
BLOCK_TABLE_PAGE = 16


# -- measurement -----------------------------------------------------------------------------------


@dataclass
class MeasuredMask:
    """One forward step: the mask a path really applied beside the one the layer meant."""

    mode: str
    q_len: int
    kv_len: int
    intended: torch.Tensor  # bool [q_len, kv_len]
    measured: torch.Tensor  # bool [q_len, kv_len] (query head 0)
    weights: torch.Tensor  # float [q_len, kv_len] (query head 0)
    heads_agree: bool

    @property
    def disagree(self) -> torch.Tensor:
        return self.intended ^ self.measured

    @property
    def ok(self) -> bool:
        return self.heads_agree and not bool(self.disagree.any())

    @property
    def attended_keys(self) -> int:
        """The most keys any query weighted."""
        return int(self.measured.sum(dim=1).max())


def probe_shapes(keys: int | None) -> dict[str, tuple[int, int]]:
    """``mode -> (q_len, kv_len)``: long enough that the window binds (kv_len > W) in every mode."""
    span = (keys or 6) + 3
    return {"prefill": (span, span), "extend": (3, span + 1), "decode": (1, span + 1), "verify": (3, span + 2)}


def measure(
    path: AttentionPath,
    window_arg: Any,
    intended_keys: int | None,
    mode: str,
    q_len: int,
    kv_len: int,
    *,
    num_q_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 64,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> tuple[MeasuredMask, Any]:
    """Run ``path`` once per ``head_dim`` key positions with one-hot values; return the mask and a result."""
    page = BLOCK_TABLE_PAGE if path.kv_layout == "block_table" else 1
    weights = torch.zeros(num_q_heads, q_len, kv_len, dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    k = torch.randn(kv_len, num_kv_heads, head_dim, generator=gen)
    result = None
    for first in range(0, kv_len, head_dim):
        v = torch.zeros(kv_len, num_kv_heads, head_dim)
        pos = torch.arange(first, min(kv_len, first + head_dim))
        v[pos, :, pos - first] = 1.0
        batch = random_paged_batch([q_len], [kv_len], num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
                                   head_dim=head_dim, page_size=page, garbage=0.0, dtype=dtype, device=device,
                                   generator=torch.Generator().manual_seed(2))
        slots = batch.request_slots(0).to(torch.int64)
        batch.q.zero_()
        batch.k_buffer[slots], batch.v_buffer[slots] = k.to(batch.k_buffer), v.to(batch.v_buffer)
        result = path.run(batch, window_arg)
        out = result.out.double().cpu()  # [q_len, Hq, D]
        weights[:, :, pos] = out[:, :, : len(pos)].permute(1, 0, 2)
    measured = weights > 0.25 / kv_len  # attended keys weigh 1/n >= 1/kv_len; the rest ~0
    intended = attended_mask(batch, 0, Window(intended_keys))
    heads_agree = bool((measured == measured[0]).all())
    return MeasuredMask(mode, q_len, kv_len, intended, measured[0], weights[0].float(), heads_agree), result


@dataclass
class ProbeRow:
    """One path (or call site) measured in every mode it declares."""

    path: str
    tier: str
    device: str
    window_arg: Any
    intended_keys: int | None
    attended_keys: int | None  # most keys any query weighted in any mode; None if nothing ran
    ok: bool
    site: str | None = None
    masks: dict[str, MeasuredMask] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # mode -> why not measured

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "tier": self.tier, "device": self.device, "site": self.site,
            "window_arg": list(self.window_arg) if isinstance(self.window_arg, tuple) else self.window_arg,
            "intended_keys": self.intended_keys, "attended_keys": self.attended_keys, "ok": self.ok,
            "modes": {m: {"ok": mm.ok, "attended_keys": mm.attended_keys} for m, mm in self.masks.items()},
            "skipped": self.skipped,
        }


def _probe(path: AttentionPath, window_arg: Any, intended: int | None, modes: Sequence[str], site: str | None,
           device: str | torch.device, head_dim: int) -> ProbeRow:
    ok_here, why = path.available()
    row = ProbeRow(path.name, path.tier, str(device), window_arg, intended, None, False, site)
    if not ok_here:
        row.skipped = {m: why for m in modes}
        return row
    for mode, (q_len, kv_len) in probe_shapes(intended).items():
        if mode not in modes:
            continue
        if mode not in path.modes:
            row.skipped[mode] = f"{path.name} does not declare mode {mode!r}"
            continue
        try:
            mask, result = measure(path, window_arg, intended, mode, q_len, kv_len, device=device,
                                   head_dim=head_dim)
        except PathUnavailableError as error:
            row.skipped[mode] = str(error)
            continue
        row.masks[mode] = mask
        row.tier, row.device = result.tier, result.device
    if row.masks:
        row.attended_keys = max(m.attended_keys for m in row.masks.values())
        row.ok = all(m.ok for m in row.masks.values())
    return row


def runnable_paths(device: str | torch.device = "cpu") -> list[AttentionPath]:
    """Registered paths that are available here and run on ``device``'s kind."""
    kind = torch.device(device).type
    kinds = {"cpu": {"cpu"}, "cuda": {"cuda", "rocm"}}.get(kind, {kind})
    return [path for path in all_paths() if path.available()[0] and path.devices & kinds]


def probe_path(path: str, keys: int | None, *, modes: Sequence[str] = PROBE_MODES,
               device: str | torch.device = "cpu", head_dim: int = 64) -> ProbeRow:
    """Measure ``path`` run with the kit's converter's window argument for ``keys`` keys."""
    keys = check_keys(keys)
    chosen = get_path(path)
    budget.check(budget.probe_estimate(f"probe of {path} at {keys} keys", probe_shapes(keys), modes, [chosen.tier],
                                       device, head_dim), budget.PROBE_WAY_OUT)
    window_arg = from_keys(chosen.convention, keys) if chosen.convention else None
    return _probe(chosen, window_arg, keys, modes, None, device, head_dim)


def sglang_site_rows(keys: int) -> list[tuple[CallSite, AttentionPath, Any]]:
    """``(site, path, window_arg)`` for each aiter call site, for a layer meant to attend ``keys`` keys."""
    checked = check_keys(keys)
    if checked is None:
        raise UsageError("--sglang-sites probes a sliding layer: give --keys W >= 1")
    sws = from_keys("sglang", checked)
    return [(site, site_path(site), site.window_arg(sws)) for site in SITES.values()]


def probe_sglang_sites(keys: int, *, device: str | torch.device = "cpu", head_dim: int = 64) -> list[ProbeRow]:
    """Measure every aiter call site with the window SGLang passes for ``sliding_window_size = keys - 1``."""
    rows, sites = [], sglang_site_rows(keys)
    budget.check(budget.probe_estimate(f"probe of {len(sites)} call sites at {keys} keys", probe_shapes(keys),
                                       PROBE_MODES, [b.tier for _, b, _ in sites if b.available()[0]], device,
                                       head_dim), budget.PROBE_WAY_OUT)
    for site, path, window_arg in sites:
        modes = [m for m in site.modes if m in PROBE_MODES]
        rows.append(_probe(path, window_arg, keys, modes, site.name, device, head_dim))
    return rows



#: vLLM's backend that decodes every layer with aiter's Triton ``unified_attention`` (the one aiter backend vLLM 0.34
#: accepts for every Gemma-4 layer), and SGLang's aiter call site that does.
VLLM_UNIFIED_BACKEND, SGLANG_UNIFIED_SITE = "ROCM_AITER_UNIFIED_ATTN", "decode.unified"


def probe_engines(keys: int, *, device: str | torch.device = "cpu", head_dim: int = 64) -> list[ProbeRow]:
    """aiter's ``unified_attention`` at decode, measured with each engine's window argument for a sliding layer
    meant to attend ``keys`` keys: SGLang's aiter call site (:data:`SGLANG_UNIFIED_SITE`), then vLLM's ROCm backend
    (:data:`VLLM_UNIFIED_BACKEND`); one row each, ``site`` naming the engine."""
    from swa_kit.launch.vllm_routes import route

    sglang = next(arg for site, _, arg in sglang_site_rows(keys) if site.name == SGLANG_UNIFIED_SITE)
    vllm = route(VLLM_UNIFIED_BACKEND, "decode", keys, head_dim, False, False).window_arg
    path = get_path("aiter_triton_unified")
    budget.check(budget.probe_estimate(f"probe of both engines' arguments at {keys} keys", probe_shapes(keys),
                                       ("decode",), [path.tier], device, head_dim), budget.PROBE_WAY_OUT)
    return [_probe(path, arg, keys, ("decode",), engine, device, head_dim)
            for engine, arg in (("SGLang", sglang), ("vLLM", vllm))]


def agreement(keys: int | None = 5, *, device: str | torch.device = "cpu", head_dim: int = 64,
              seed: int = 0) -> list[dict[str, Any]]:
    """Every runnable path against the reference on one fresh random batch per declared mode.

    The window argument is the kit's converter's for ``keys``; a path that declares no window
    runs without one and is compared with the reference without one (it cannot mean otherwise).
    Freed slots hold finite garbage (aiter's unified kernel loads whole tiles, so NaN there would poison
    its output; ``tests/test_aiter_triton.py`` measures that). Returns rows
    ``path, tier, device, mode, window_arg, max_abs_err``.
    """
    from swa_kit.attention.reference import reference_attention

    gen = torch.Generator().manual_seed(seed)
    rows = []
    shapes = {"prefill": ([9, 6], [9, 6]), "extend": ([3, 4], [14, 21]), "decode": ([1, 1], [17, 30]),
              "verify": ([3, 3], [12, 25])}
    for path in runnable_paths(device):
        used = keys if path.honours_window else None
        window_arg = from_keys(path.convention, used) if path.convention else None
        page = BLOCK_TABLE_PAGE if path.kv_layout == "block_table" else 1
        for mode, (q_lens, seq_lens) in shapes.items():
            if mode not in path.modes:
                continue
            batch = random_paged_batch(q_lens, seq_lens, head_dim=head_dim, page_size=page, window_keys=used,
                                       garbage=1e4, device=device, generator=gen)
            try:
                result = path.run(batch, window_arg)
            except PathUnavailableError as error:
                rows.append({"path": path.name, "tier": path.tier, "device": str(device), "mode": mode,
                             "window_arg": window_arg, "max_abs_err": f"skipped: {error}"})
                continue
            err = (result.out.double() - reference_attention(batch, used).out).abs().max().item()
            rows.append({"path": path.name, "tier": result.tier, "device": result.device, "mode": mode,
                         "window_arg": window_arg, "max_abs_err": float(f"{err:.2e}")})
    return rows
