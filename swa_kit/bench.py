"""Benchmarks: sliding-window decode and prefill, every path side by side, and recorded runs.

What is timed (medians of CUDA-event timings after warm-up, ``triton.testing.do_bench``):

* decode (one query per request, all requests at the same context ``L``):
  ``kit_triton_swa`` at page size 1 (``kv_indices`` over a token-level random permutation
  of slots, SGLang's layout after churn) and 16 (a block table over randomly permuted
  pages); ``aiter_triton_unified`` (aiter's own kernel through the kit's launcher,
  :func:`swa_kit.attention.aiter_triton.unified_attention`) at page size 16 (its decode
  config cannot compile smaller tiles on NVIDIA); and three torch paths over *contiguous*
  ``[B, Hkv, L, D]`` KV: ``flex_attention`` (a sliding BlockMask), ``sdpa_window`` (SDPA
  over the window slice: the ideal layout), ``sdpa_dense_mask`` (SDPA over the whole
  context with a boolean mask: the naive way) and ``sdpa_full`` (no window: what the
  window saves). ``kit_triton_full`` is the kit's kernel with no window, for the
  time-vs-context picture. The torch paths are called directly here (thin calls, GQA as
  ``[B, Hkv, G, D]`` queries) rather than through ``swa_kit.attention.torch_paths``, whose
  per-request gathers are right for checking and wrong for timing.
* prefill (one request of ``T`` tokens, causal + window): FlexAttention, aiter's unified
  kernel, SDPA with a dense mask, and SDPA full causal attention.

Per row: time, achieved bandwidth (the window's K/V bytes over the time: the bytes a
sliding-window decode must read) against the device-to-device copy bandwidth measured in
the same run, TFLOP/s for prefill (FLOPs of the attended pairs only), and the ratio to
every other path of the same case (``ratios[other] = other's time / this time``: above 1,
this path is faster). Before timing, each path is checked against the float64 reference
on a small case; a path that fails the check is timed but marked ``correct: false``.

Without a GPU nothing is timed: :func:`load_recorded` reads ``data/bench/*.json``, which
carry the machine, versions, date and exact command of the run that produced them.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from swa_kit.attention.batch import AttentionBatch
from swa_kit.errors import BackendUnavailableError, UsageError
from swa_kit.window import Window, from_keys

SCHEMA = 1
RECORDED_DIR = Path(__file__).resolve().parents[1] / "data" / "bench"
KiB = 1024

#: The headline configuration of the targets (issue #6, section 3).
HEADLINE = {"batch": 32, "hq": 32, "hkv": 8, "head_dim": 128, "window": 4096, "dtype": "bfloat16"}
TARGETS = {
    "bandwidth_p16": 0.85,  # fraction of measured copy bandwidth, kit at page size 16
    "bandwidth_p1": 0.75,  # same at page size 1
    "vs_flex": 1.25,  # kit time ratio over FlexAttention
    "vs_aiter": 1.5,  # kit time ratio over aiter's unified_attention, same page size
    "context_flatness": 1.10,  # time at the longest context / time at the shortest
}

DECODE_PATHS = {
    "kit_triton_swa": "the kit's Triton kernel, paged (page size 1 via kv_indices, 16 via a block table)",
    "aiter_triton_unified": "aiter's Triton unified_attention through the kit's launcher, paged",
    "aiter_native_unified": "aiter's own unified_attention called as SGLang calls it (ROCm GPUs only), paged",
    "flex_attention": "FlexAttention with a sliding BlockMask over contiguous KV (torch.compile)",
    "sdpa_window": "SDPA over the window slice of contiguous KV (the ideal layout)",
    "sdpa_dense_mask": "SDPA over the whole contiguous context with a dense boolean mask (naive)",
    "sdpa_full": "SDPA over the whole contiguous context, no window (full attention)",
    "kit_triton_full": "the kit's kernel with no window (full attention, page size 16)",
}
PREFILL_PATHS = {
    "flex_attention": "FlexAttention, causal sliding BlockMask (torch.compile)",
    "aiter_triton_unified": "aiter's Triton unified_attention through the kit's launcher, page size 16",
    "sdpa_dense_mask": "SDPA with a dense [T, T] boolean causal-window mask (naive)",
    "sdpa_full": "SDPA causal, no window (full attention)",
}


# -- random batches (shared with the tests) ---------------------------------------------------


def random_decode_batch(seq_lens: list[int], hq: int, hkv: int, head_dim: int, page_size: int,
                        dtype: torch.dtype, device: Any, generator: torch.Generator,
                        q_lens: list[int] | None = None) -> AttentionBatch:
    """A batch whose requests own randomly permuted pages (slots at page size 1) of one buffer.

    Slot/page 0 stays unused, like SGLang's reserved dummy slot. Queries are aligned to
    the end of each request (``q_lens`` defaults to one query per request: decode).
    """
    q_lens = q_lens or [1] * len(seq_lens)
    pages_per_req = [-(-n // page_size) for n in seq_lens]
    total_pages = sum(pages_per_req) + 1
    perm = torch.randperm(total_pages - 1, generator=generator) + 1
    slots, used = [], 0
    for n, pages in zip(seq_lens, pages_per_req):
        own = perm[used : used + pages]
        used += pages
        slots.append((own[:, None] * page_size + torch.arange(page_size)).flatten()[:n])
    kv_indices = torch.cat(slots).to(torch.int32)
    kv_indptr = torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int32)
    qo_indptr = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    shape = (total_pages * page_size, hkv, head_dim)
    k = torch.randn(shape, generator=generator).to(dtype)
    v = torch.randn(shape, generator=generator).to(dtype)
    q = torch.randn(sum(q_lens), hq, head_dim, generator=generator).to(dtype)
    return AttentionBatch(q.to(device), k.to(device), v.to(device), qo_indptr.to(device), kv_indptr.to(device),
                          kv_indices.to(device), head_dim**-0.5, page_size=page_size)


def poison_unattended(batch: AttentionBatch, keys: int | None) -> None:
    """Write NaN into every K/V slot no query of ``batch`` attends under ``keys``.

    A path that reads one key outside the window then returns NaN instead of a
    plausible wrong number.
    """
    window = Window(keys)
    keep = torch.zeros(batch.k_buffer.shape[0], dtype=torch.bool, device=batch.device)
    for b in range(batch.batch_size):
        positions = torch.arange(int(batch.seq_lens[b]))
        attended = window.attends(batch.query_positions(b)[:, None], positions[None, :]).any(dim=0)
        keep[batch.request_slots(b).to(torch.int64)[attended.to(batch.device)]] = True
    batch.k_buffer[~keep] = float("nan")
    batch.v_buffer[~keep] = float("nan")


# -- cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeCase:
    batch: int
    hq: int
    hkv: int
    head_dim: int
    context: int
    window: int
    dtype: str = "bfloat16"

    @property
    def itemsize(self) -> int:
        return torch.empty(0, dtype=getattr(torch, self.dtype)).element_size()

    def kv_bytes(self, keys: int | None) -> int:
        """K and V bytes of ``keys`` positions (None: the whole context) for every request and KV head."""
        n = self.context if keys is None else min(keys, self.context)
        return 2 * self.batch * self.hkv * n * self.head_dim * self.itemsize

    @property
    def window_bytes(self) -> int:
        return self.kv_bytes(self.window)


@dataclass(frozen=True)
class PrefillCase:
    tokens: int
    hq: int
    hkv: int
    head_dim: int
    window: int
    dtype: str = "bfloat16"

    def flops(self, keys: int | None) -> int:
        """Matmul FLOPs (QK and PV, 2 each per multiply-add) over the attended (query, key) pairs."""
        t = self.tokens
        if keys is None or keys >= t:
            pairs = t * (t + 1) // 2
        else:  # the first `keys` queries see 1..keys keys, the rest see `keys` each
            pairs = keys * (keys + 1) // 2 + (t - keys) * keys
        return 4 * self.hq * self.head_dim * pairs


K = 1024


def decode_grid(quick: bool) -> list[DecodeCase]:
    """The decode cases: quick = the headline shape at two contexts and two windows."""
    if quick:
        return [DecodeCase(32, 32, 8, 128, ctx, w) for ctx in (8 * K, 128 * K) for w in (1024, 4096)]
    return [
        DecodeCase(b, hq, hkv, d, ctx, w)
        for b in (1, 32, 128)
        for hq, hkv in ((32, 8), (32, 16))
        for d in (128, 256)
        for ctx in (8 * K, 32 * K, 128 * K)
        for w in (128, 1024, 4096)
    ]


def prefill_grid(quick: bool) -> list[PrefillCase]:
    if quick:
        return [PrefillCase(8 * K, 32, 8, 128, 1024)]
    return [PrefillCase(t, 32, 8, 128, w) for t in (8 * K, 16 * K, 32 * K) for w in (1024, 4096)]


def flex_in_grid(case: DecodeCase, quick: bool) -> bool:
    """FlexAttention recompiles per shape (tens of seconds each): time it on the headline family only."""
    return quick or (case.batch, case.hq, case.hkv, case.head_dim) == (
        HEADLINE["batch"], HEADLINE["hq"], HEADLINE["hkv"], HEADLINE["head_dim"])


# -- rows and ratios --------------------------------------------------------------------------


def row_label(path: str, page_size: int | None) -> str:
    return path if page_size is None else f"{path}@p{page_size}"


def case_key(row: dict[str, Any]) -> tuple:
    return tuple(sorted(row["case"].items()))


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Give every timed row ``ratios[label] = other's time / this time`` for each other row of its case."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["mode"], case_key(row)), []).append(row)
    for group in groups.values():
        timed = [r for r in group if r.get("time_ms")]
        for row in timed:
            row["ratios"] = {o["label"]: o["time_ms"] / row["time_ms"] for o in timed if o is not row}


def make_row(mode: str, case: DecodeCase | PrefillCase, path: str, page_size: int | None, time_ms: float | None,
             copy_tbs: float | None, correct: bool | None, note: str = "") -> dict[str, Any]:
    """One result row; bandwidth for decode, TFLOP/s for prefill."""
    row: dict[str, Any] = {"mode": mode, "case": asdict(case), "path": path, "page_size": page_size,
                           "label": row_label(path, page_size), "time_ms": time_ms, "correct": correct}
    if note:
        row["note"] = note
    if time_ms:
        seconds = time_ms * 1e-3
        if isinstance(case, DecodeCase):
            row["window_bytes"] = case.window_bytes
            row["window_tbs"] = case.window_bytes / seconds / 1e12
            row["copy_fraction"] = row["window_tbs"] / copy_tbs if copy_tbs else None
        else:
            keys = None if path == "sdpa_full" else case.window
            row["flops"] = case.flops(keys)
            row["window_flops"] = case.flops(case.window)
            row["tflops"] = case.flops(keys) / seconds / 1e12
            row["window_tflops"] = case.flops(case.window) / seconds / 1e12
    return row


# -- targets ----------------------------------------------------------------------------------


def _headline_rows(decode: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in decode if r.get("time_ms") and all(r["case"].get(k) == v for k, v in HEADLINE.items())]


def evaluate_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of issue #6 §3 at the headline shape: the measured value at every context, and the verdict.

    A target is met only if it holds at every context where both sides were measured;
    ``missing_contexts`` lists where one side has no time (failed or not run).
    """
    rows = _headline_rows(result.get("decode", []))
    by = {(r["label"], r["case"]["context"]): r for r in rows}
    contexts = sorted({r["case"]["context"] for r in rows})
    out: list[dict[str, Any]] = []

    def add(name: str, target: float, label: str, values: dict[int, float | None], how: str) -> None:
        present = {c: v for c, v in values.items() if v is not None}
        out.append({"target": name, "label": label, "threshold": target, "how": how,
                    "by_context": present, "worst": min(present.values()) if present else None,
                    "missing_contexts": [c for c, v in values.items() if v is None],
                    "met": all(v >= target for v in present.values()) if present else None})

    for ps, key in ((16, "bandwidth_p16"), (1, "bandwidth_p1")):
        label = row_label("kit_triton_swa", ps)
        add(key, TARGETS[key], label, {c: by[(label, c)].get("copy_fraction") if (label, c) in by else None
                                       for c in contexts}, "window bytes / time, over measured copy bandwidth")
        flex = {c: (by[("flex_attention", c)]["time_ms"] / by[(label, c)]["time_ms"]
                    if (label, c) in by and ("flex_attention", c) in by else None) for c in contexts}
        add("vs_flex", TARGETS["vs_flex"], label, flex, "FlexAttention time / kit time")
        aiter_label = row_label("aiter_triton_unified", ps)
        aiter = {c: (by[(aiter_label, c)]["time_ms"] / by[(label, c)]["time_ms"]
                     if (label, c) in by and (aiter_label, c) in by else None) for c in contexts}
        add("vs_aiter", TARGETS["vs_aiter"], label, aiter, f"{aiter_label} time / kit time (same page size)")
        if len(contexts) >= 2 and (label, contexts[0]) in by and (label, contexts[-1]) in by:
            ratio = by[(label, contexts[-1])]["time_ms"] / by[(label, contexts[0])]["time_ms"]
            out.append({"target": "context_flatness", "label": label, "threshold": TARGETS["context_flatness"],
                        "how": f"time at {contexts[-1]} / time at {contexts[0]} (lower is better)",
                        "by_context": {contexts[-1]: ratio}, "worst": ratio,
                        "met": ratio <= TARGETS["context_flatness"]})
    prefill = [r for r in result.get("prefill", []) if r.get("time_ms") and r.get("correct") and
               r["path"] != "sdpa_full"]
    if prefill:
        best: dict[tuple, dict[str, Any]] = {}
        for r in prefill:
            key = (r["case"]["tokens"], r["case"]["window"])
            if key not in best or r["time_ms"] < best[key]["time_ms"]:
                best[key] = r
        out.append({"target": "prefill_fastest", "label": "fastest correct windowed path", "threshold": None,
                    "how": "TFLOP/s of attended pairs, per (tokens, window)",
                    "by_context": {f"{t}/{w}": f"{r['label']} {r['tflops']:.0f}" for (t, w), r in sorted(best.items())},
                    "worst": min(r["tflops"] for r in best.values()), "met": None})
    return out


# -- recorded runs ----------------------------------------------------------------------------


def recorded_files(directory: Path = RECORDED_DIR) -> list[Path]:
    return sorted(directory.glob("*.json"))


def load_recorded(path: Path | str | None = None) -> dict[str, Any]:
    """A recorded run (the newest in ``data/bench`` by default), marked ``recorded: True``."""
    if path is None:
        files = recorded_files()
        if not files:
            raise FileNotFoundError(f"no recorded benchmark in {RECORDED_DIR}; run `swa-kit bench --json` on a GPU")
        path = max(files, key=lambda p: json.loads(p.read_text()).get("date", ""))
    try:
        result = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"{str(path)!r} is not a JSON benchmark result ({error}); give a file swa-kit bench wrote") \
            from None
    if not isinstance(result, dict):
        raise UsageError(f"{str(path)!r} holds a JSON {type(result).__name__}, not a benchmark result object")
    check_schema(result)
    result["recorded"] = True
    result["recorded_file"] = str(path)
    return result


REQUIRED_KEYS = ("schema", "date", "command", "machine", "versions", "copy_tbs", "decode", "prefill", "checks")
ROW_KEYS = ("mode", "case", "path", "page_size", "label", "time_ms", "correct")


def check_schema(result: dict[str, Any]) -> None:
    """Raise ValueError naming what a benchmark result lacks."""
    missing = [k for k in REQUIRED_KEYS if k not in result]
    if missing:
        raise UsageError(f"benchmark result lacks {missing}; was it written by swa_kit.bench (schema {SCHEMA})?")
    if result["schema"] != SCHEMA:
        raise UsageError(f"benchmark schema {result['schema']} != {SCHEMA}; re-record with this swa_kit")
    for row in result["decode"] + result["prefill"]:
        lacking = [k for k in ROW_KEYS if k not in row]
        if lacking:
            raise UsageError(f"benchmark row {row.get('label')!r} lacks {lacking}")


# -- timing on a GPU --------------------------------------------------------------------------


def gpu_available() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "no CUDA/ROCm GPU visible to torch"
    try:
        import triton  # noqa: F401
    except ImportError:
        return False, "Triton is not installed"
    return True, torch.cuda.get_device_name()


def time_ms(fn: Callable[[], Any], warmup_ms: int, rep_ms: int) -> float:
    """Median of CUDA-event timings after warm-up (L2 flushed between runs by do_bench)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def copy_bandwidth_tbs(device: torch.device, gib: float = 2.0, warmup_ms: int = 25, rep_ms: int = 200) -> float:
    """Device-to-device copy bandwidth, counting bytes read plus bytes written."""
    n = int(gib * 2**30) // 2
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), warmup_ms, rep_ms)
    del src, dst
    return 2 * n * 2 / (ms * 1e-3) / 1e12


def _versions() -> dict[str, Any]:
    import importlib.metadata as md

    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}
    for dist in ("triton", "amd-aiter", "swa_kit"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def _machine(device: torch.device) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(device)
    return {"gpu": props.name, "sms": props.multi_processor_count, "memory_gib": round(props.total_memory / 2**30, 1),
            "capability": f"{props.major}.{props.minor}", "host": platform.node(), "platform": platform.platform()}


class _DecodeData:
    """One (batch, heads, head_dim, context) family: the kit's paged buffer and contiguous torch KV."""

    def __init__(self, case: DecodeCase, device: torch.device, gen: torch.Generator) -> None:
        b, hkv, d, ctx = case.batch, case.hkv, case.head_dim, case.context
        dtype = getattr(torch, case.dtype)
        self.case, self.device, self.sm_scale = case, device, d**-0.5
        # Kit layout: one token pool [B * L, Hkv, D]; page ids and slot ids randomly permuted.
        self.k = torch.randn(b * ctx, hkv, d, device=device, dtype=dtype)
        self.v = torch.randn(b * ctx, hkv, d, device=device, dtype=dtype)
        pages = torch.randperm(b * ctx // 16, device=device, generator=gen).to(torch.int32)
        self.block_table = pages.view(b, ctx // 16)
        self.tables = {
            1: (torch.randperm(b * ctx, device=device, generator=gen).to(torch.int32),
                torch.arange(b, device=device, dtype=torch.int32) * ctx),
            16: (pages, torch.arange(b, device=device, dtype=torch.int32) * (ctx // 16)),
        }
        self.seq_lens = torch.full((b,), ctx, device=device, dtype=torch.int32)
        self.q = torch.randn(b, case.hq, d, device=device, dtype=dtype)
        # Torch layout: contiguous [B, Hkv, L, D]; GQA queries as [B, Hkv, G, D].
        self.kc = torch.randn(b, hkv, ctx, d, device=device, dtype=dtype)
        self.vc = torch.randn(b, hkv, ctx, d, device=device, dtype=dtype)
        self.qg = self.q.view(b, hkv, case.hq // hkv, d)

    def kit(self, page_size: int, keys: int | None) -> Callable[[], Any]:
        from swa_kit.attention.kit_triton import plan_decode

        table, row_start = self.tables[page_size]
        plan = plan_decode(self.k, self.v, table, row_start, self.seq_lens, page_size, keys, self.sm_scale,
                           self.case.hq)
        out = torch.empty_like(self.q)
        return lambda: plan.run(self.q, out)

    def batch(self, page_size: int) -> AttentionBatch:
        """The paged buffer as an :class:`AttentionBatch` over the same slots the kernels read."""
        c = self.case
        table, _ = self.tables[page_size]
        if page_size == 1:
            kv_indices = table
        else:
            offsets = torch.arange(16, device=self.device)
            kv_indices = (self.block_table.to(torch.int64)[:, :, None] * 16 + offsets).flatten()
        steps = torch.arange(c.batch + 1, device=self.device)
        return AttentionBatch(self.q, self.k, self.v, steps, steps * c.context, kv_indices, self.sm_scale,
                              page_size=page_size)

    def aiter_native(self, keys: int) -> Callable[[], Any]:
        from swa_kit.attention import aiter_native

        args = aiter_native.unified_attention_args(self.batch(16), from_keys("aiter_unified", keys),
                                                   out=torch.empty_like(self.q))
        op = aiter_native.native_op("unified_attention")
        return lambda: (op(**args), args["out"])[1]

    def aiter(self, keys: int) -> Callable[[], Any]:
        from swa_kit.attention.aiter_triton import unified_attention

        c = self.case
        kp, vp = self.k.view(-1, 16, c.hkv, c.head_dim), self.v.view(-1, 16, c.hkv, c.head_dim)
        cu_q = torch.arange(c.batch + 1, device=self.device, dtype=torch.int32)
        out = torch.empty_like(self.q)
        window = from_keys("aiter_unified", keys)
        return lambda: (unified_attention(self.q, kp, vp, out, cu_q, 1, self.seq_lens, c.context, self.sm_scale,
                                          window, self.block_table), out)[1]

    def sdpa_window(self, keys: int) -> Callable[[], Any]:
        import torch.nn.functional as F

        start = max(0, self.case.context - keys)
        k, v = self.kc[:, :, start:], self.vc[:, :, start:]
        return lambda: F.scaled_dot_product_attention(self.qg, k, v, scale=self.sm_scale)

    def sdpa_dense_mask(self, keys: int) -> Callable[[], Any]:
        import torch.nn.functional as F

        mask = torch.zeros(1, 1, 1, self.case.context, dtype=torch.bool, device=self.device)
        mask[..., max(0, self.case.context - keys):] = True
        return lambda: F.scaled_dot_product_attention(self.qg, self.kc, self.vc, attn_mask=mask, scale=self.sm_scale)

    def sdpa_full(self) -> Callable[[], Any]:
        import torch.nn.functional as F

        return lambda: F.scaled_dot_product_attention(self.qg, self.kc, self.vc, scale=self.sm_scale)

    def flex(self, keys: int) -> Callable[[], Any]:
        flex_attention, create_block_mask = _flex()
        c = self.case
        first = torch.tensor(max(0, c.context - keys), device=self.device)  # a tensor: no recompile per window

        def sliding(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return kv_idx >= first  # every query sits at position L - 1: the window is [L - W, L)

        mask = create_block_mask(sliding, B=None, H=None, Q_LEN=self.qg.shape[2], KV_LEN=c.context,
                                 device=self.device)
        return lambda: flex_attention(self.qg, self.kc, self.vc, block_mask=mask, scale=self.sm_scale)


_FLEX: dict[str, Any] = {}


def _flex() -> tuple[Callable[..., Any], Callable[..., Any]]:
    if not _FLEX:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
        _FLEX["mask"] = create_block_mask
    return _FLEX["fn"], _FLEX["mask"]


def _as_tokens(out: torch.Tensor) -> torch.Tensor:
    """Torch-path decode output [B, Hkv, G, D] as the kit's [B, Hq, D]."""
    return out.reshape(out.shape[0], -1, out.shape[-1])


def native_aiter_runs() -> bool:
    """Whether aiter's own ops run here (a ROCm GPU where ``import aiter`` works)."""
    from swa_kit.attention import aiter_native

    return aiter_native.available()[0]


def check_decode_paths(device: torch.device, gen: torch.Generator) -> list[dict[str, Any]]:
    """Every decode path against the float64 reference on a fresh small case (bf16, GQA 4)."""
    from swa_kit.attention.reference import reference_attention

    case = DecodeCase(batch=3, hq=16, hkv=4, head_dim=128, context=3 * 1024, window=1000)
    data = _DecodeData(case, device, gen)
    c = case
    rows = []
    # The kit and aiter read the paged buffer; build the reference's batches over the same slots.
    for page_size in (1, 16):
        batch = data.batch(page_size)
        ref = reference_attention(batch, c.window).out
        runs = {("kit_triton_swa", page_size): data.kit(page_size, c.window),
                ("kit_triton_full", page_size): data.kit(page_size, None)}
        if page_size == 16:
            runs[("aiter_triton_unified", 16)] = data.aiter(c.window)
            if native_aiter_runs():
                runs[("aiter_native_unified", 16)] = data.aiter_native(c.window)
        full_ref = reference_attention(batch, None).out
        for (path, ps), fn in runs.items():
            rows.append(_check(path, ps, fn, full_ref if path == "kit_triton_full" else ref, lambda o: o))
    # Torch paths read contiguous KV: one request's keys are kc[b, :, :L].
    slots = torch.arange(c.batch * c.context, device=device)
    batch = AttentionBatch(data.q, data.kc.transpose(1, 2).reshape(-1, c.hkv, c.head_dim),
                           data.vc.transpose(1, 2).reshape(-1, c.hkv, c.head_dim),
                           torch.arange(c.batch + 1, device=device),
                           torch.arange(c.batch + 1, device=device) * c.context, slots, data.sm_scale)
    ref, full_ref = reference_attention(batch, c.window).out, reference_attention(batch, None).out
    for path, fn, expected in (("sdpa_window", data.sdpa_window(c.window), ref),
                               ("sdpa_dense_mask", data.sdpa_dense_mask(c.window), ref),
                               ("sdpa_full", data.sdpa_full(), full_ref),
                               ("flex_attention", data.flex(c.window), ref)):
        rows.append(_check(path, None, fn, expected, _as_tokens))
    return rows


def _check(path: str, page_size: int | None, fn: Callable[[], Any], ref: torch.Tensor,
           shape: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, Any]:
    row: dict[str, Any] = {"path": path, "page_size": page_size, "label": row_label(path, page_size)}
    try:
        out = fn()
        out = shape(out if isinstance(out, torch.Tensor) else None)
        error = float((out.double() - ref).norm() / ref.norm())
        row.update(rel_error=error, correct=bool(error < 2e-2))
    except Exception as exc:  # a path that cannot run here is reported, not fatal
        row.update(rel_error=None, correct=False, error=error_note(exc))
    return row


def error_note(exc: Exception, limit: int = 600) -> str:
    """An exception as one bounded string: its type, its first line and its last lines (where the cause is)."""
    text = f"{type(exc).__name__}: {exc}"
    if len(text) <= limit:
        return text
    return text[: limit // 3] + " ... " + text[-(2 * limit) // 3:]


def _prefill_data(case: PrefillCase, device: torch.device) -> dict[str, Any]:
    dtype = getattr(torch, case.dtype)
    t, g = case.tokens, case.hq // case.hkv
    q = torch.randn(1, case.hq, t, case.head_dim, device=device, dtype=dtype)
    k = torch.randn(1, case.hkv, t, case.head_dim, device=device, dtype=dtype)
    v = torch.randn(1, case.hkv, t, case.head_dim, device=device, dtype=dtype)
    return {"q": q, "k": k, "v": v, "ke": k.repeat_interleave(g, dim=1), "ve": v.repeat_interleave(g, dim=1)}


def prefill_paths(case: PrefillCase, data: dict[str, Any], device: torch.device) -> dict[str, Callable[[], Any]]:
    """The prefill callables (output [1, Hq, T, D] for torch paths, [T, Hq, D] for aiter)."""
    import torch.nn.functional as F

    q, k, v, ke, ve = data["q"], data["k"], data["v"], data["ke"], data["ve"]
    t, w, scale = case.tokens, case.window, case.head_dim**-0.5
    flex_attention, create_block_mask = _flex()
    width = torch.tensor(w, device=device)

    def causal_window(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return (kv_idx <= q_idx) & (q_idx - kv_idx < width)

    block_mask = create_block_mask(causal_window, B=None, H=None, Q_LEN=t, KV_LEN=t, device=device)
    pos = torch.arange(t, device=device)
    dense = Window(w).attends(pos[:, None], pos[None, :])
    paths: dict[str, Callable[[], Any]] = {
        "flex_attention": lambda: flex_attention(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=True),
        "sdpa_dense_mask": lambda: F.scaled_dot_product_attention(q, ke, ve, attn_mask=dense, scale=scale),
        "sdpa_full": lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=True, scale=scale),
    }
    try:
        from swa_kit.attention.aiter_triton import unified_attention

        qt = q[0].transpose(0, 1).contiguous()  # [T, Hq, D]
        kp = k[0].transpose(0, 1).contiguous().view(-1, 16, case.hkv, case.head_dim)
        vp = v[0].transpose(0, 1).contiguous().view(-1, 16, case.hkv, case.head_dim)
        out = torch.empty_like(qt)
        cu_q = torch.tensor([0, t], device=device, dtype=torch.int32)
        seq = torch.tensor([t], device=device, dtype=torch.int32)
        table = torch.arange(t // 16, device=device, dtype=torch.int32)[None]
        window = from_keys("aiter_unified", w)
        paths["aiter_triton_unified"] = lambda: (unified_attention(qt, kp, vp, out, cu_q, t, seq, t, scale, window,
                                                                   table), out)[1]
    except (ImportError, BackendUnavailableError) as error:
        reason = f"aiter_triton_unified cannot run here: {error}"

        def unavailable() -> Any:  # timed like the others, so the row records why instead of vanishing
            raise BackendUnavailableError(reason)

        paths["aiter_triton_unified"] = unavailable
    return paths


def check_prefill_paths(device: torch.device) -> list[dict[str, Any]]:
    """Prefill paths against the float64 reference on 1024 tokens, window 256."""
    from swa_kit.attention.reference import reference_attention

    case = PrefillCase(tokens=1024, hq=8, hkv=2, head_dim=128, window=256)
    data = _prefill_data(case, device)
    t = case.tokens
    tokens = lambda x: x[0].transpose(0, 1)  # noqa: E731 - [1, H, T, D] -> [T, H, D]
    batch = AttentionBatch(tokens(data["q"]).contiguous(), tokens(data["k"]).contiguous(),
                           tokens(data["v"]).contiguous(), torch.tensor([0, t], device=device),
                           torch.tensor([0, t], device=device), torch.arange(t, device=device), case.head_dim**-0.5)
    ref, full = reference_attention(batch, case.window).out, reference_attention(batch, None).out
    rows = []
    for path, fn in prefill_paths(case, data, device).items():
        shape = (lambda o: o) if path == "aiter_triton_unified" else tokens
        rows.append({"mode": "prefill", **_check(path, None, fn, full if path == "sdpa_full" else ref, shape)})
    return rows


def kernel_settings() -> dict[str, Any]:
    """The kit kernel's launch defaults, recorded with every run."""
    from swa_kit.attention import kit_triton as kt

    return {"tile_bytes": kt.TILE_BYTES, "block_n_at_d128": kt.block_n_for(128), "num_warps": kt.NUM_WARPS,
            "num_stages": kt.NUM_STAGES, "num_stages_head_dim_256": kt.NUM_STAGES_WIDE_HEADS, "programs_per_sm": kt.PROGRAMS_PER_SM, "min_chunk": kt.MIN_CHUNK}


def run_benchmark(quick: bool = False, warmup_ms: int = 10, rep_ms: int = 50, command: str | None = None,
                  progress: bool = True, seed: int = 0, checkpoint: Path | str | None = None) -> dict[str, Any]:
    """Check every path, then time the decode and prefill grids on this GPU; returns the result dict.

    With ``checkpoint``, the partial result is saved there after each group of cases, so a
    run stopped by a time limit still leaves its numbers.
    """
    from tqdm.auto import tqdm

    ok, reason = gpu_available()
    if not ok:
        raise BackendUnavailableError(f"swa-kit bench needs a GPU: {reason}; see the recorded runs in {RECORDED_DIR}")
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(seed)
    result: dict[str, Any] = {
        "schema": SCHEMA, "recorded": False,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command or "python -c 'swa_kit.bench.run_benchmark(...)'",
        "machine": _machine(device), "versions": _versions(),
        "settings": {"quick": quick, "warmup_ms": warmup_ms, "rep_ms": rep_ms, "timer": "triton.testing.do_bench median",
                     "seed": seed, "kit_kernel": kernel_settings()},
        "paths": {"decode": DECODE_PATHS, "prefill": PREFILL_PATHS},
        "decode": [], "prefill": [], "skipped": [],
    }
    result["copy_tbs"] = copy_bandwidth_tbs(device)
    result["checks"] = check_decode_paths(device, gen) + check_prefill_paths(device)
    correct = {(c["path"], c["page_size"]): c["correct"] for c in result["checks"] if c.get("mode") != "prefill"}
    correct_prefill = {c["path"]: c["correct"] for c in result["checks"] if c.get("mode") == "prefill"}

    cases = decode_grid(quick)
    families: dict[tuple, list[DecodeCase]] = {}
    for case in cases:
        families.setdefault((case.batch, case.hq, case.hkv, case.head_dim, case.context), []).append(case)
    budget = int(0.75 * torch.cuda.get_device_properties(device).total_memory)
    pcases = prefill_grid(quick)
    bar = tqdm(total=len(cases) + len(pcases), desc="swa-kit bench", disable=not progress, file=sys.stderr)
    for family in families.values():
        need = 2 * family[0].kv_bytes(None)  # the paged pool and the contiguous copy
        if need > budget:
            for case in family:
                result["skipped"].append({"case": asdict(case), "why": f"needs {need / 2**30:.0f} GiB of KV "
                                          f"(budget {budget / 2**30:.0f} GiB)"})
                bar.update()
            continue
        data = _DecodeData(family[0], device, gen)
        shared: dict[str, float | None] = {}
        for case in family:
            timings = []
            for ps in (1, 16):
                timings.append(("kit_triton_swa", ps, lambda ps=ps: data.kit(ps, case.window)))
            timings.append(("aiter_triton_unified", 16, lambda: data.aiter(case.window)))
            if native_aiter_runs():  # on an AMD GPU: aiter's own op beside its Triton kernel and the kit's
                timings.append(("aiter_native_unified", 16, lambda: data.aiter_native(case.window)))
            timings.append(("sdpa_window", None, lambda: data.sdpa_window(case.window)))
            if flex_in_grid(case, quick):
                timings.append(("flex_attention", None, lambda: data.flex(case.window)))
            timings += [("sdpa_dense_mask", None, lambda: data.sdpa_dense_mask(case.window)),
                        ("sdpa_full", None, data.sdpa_full), ("kit_triton_full", 16, lambda: data.kit(16, None))]
            for path, ps, build in timings:
                note, ms = "", None
                window_free = path in ("sdpa_full", "kit_triton_full")
                if window_free and path in shared:  # no window: one timing serves every window
                    ms = shared[path]
                else:
                    try:
                        ms = time_ms(build(), warmup_ms, rep_ms)
                    except Exception as exc:  # report, keep going
                        note = error_note(exc)
                    if window_free:
                        shared[path] = ms
                result["decode"].append(make_row("decode", case, path, ps, ms, result["copy_tbs"],
                                                 correct.get((path, ps)), note))
            bar.update()
        del data
        torch.cuda.empty_cache()
        if checkpoint:
            save(result, checkpoint)
    for case in pcases:
        data = _prefill_data(case, device)
        for path, fn in prefill_paths(case, data, device).items():
            note, ms = "", None
            try:
                ms = time_ms(fn, warmup_ms, rep_ms)
            except Exception as exc:
                note = error_note(exc)
            result["prefill"].append(make_row("prefill", case, path, None, ms, None, correct_prefill.get(path), note))
        bar.update()
        del data
        torch.cuda.empty_cache()
    bar.close()
    add_ratios(result["decode"])
    add_ratios(result["prefill"])
    result["targets"] = evaluate_targets(result)
    return result


def save(result: dict[str, Any], path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return path


def command_line(argv: Iterable[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


# -- text summaries ---------------------------------------------------------------------------


def summary_lines(result: dict[str, Any]) -> list[str]:
    """A short human summary: where it ran, copy bandwidth, the targets."""
    m, v = result["machine"], result["versions"]
    head = "RECORDED run" if result.get("recorded") else "this run"
    lines = [f"{head}: {m.get('gpu')} ({m.get('sms')} SMs), {result['date']}",
             f"  torch {v.get('torch')}, triton {v.get('triton')}, command: {result['command']}",
             f"  device-to-device copy: {result['copy_tbs']:.2f} TB/s (read + write)"]
    for t in result.get("targets") or evaluate_targets(result):
        verdict = {True: "MET", False: "NOT MET", None: "n/a"}[t["met"]]
        worst = t["worst"]
        shown = f"{worst:.3f}" if isinstance(worst, float) else str(worst)
        thr = "" if t["threshold"] is None else f" (target {t['threshold']})"
        lines.append(f"  {t['target']:<17} {t['label']:<22} worst {shown}{thr}: {verdict}")
    return lines


def headline_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of the headline shape, one per (context, path), for printing."""
    rows = []
    for r in sorted(_headline_rows(result.get("decode", [])), key=lambda r: (r["case"]["context"], r["time_ms"])):
        rows.append({"context": r["case"]["context"], "path": r["label"], "time_us": f"{r['time_ms'] * 1e3:.1f}",
                     "TB/s": f"{r['window_tbs']:.2f}", "of copy": f"{r['copy_fraction']:.0%}",
                     "correct": r["correct"]})
    return rows


def math_floor_us(case: DecodeCase, copy_tbs: float) -> float:
    """The bandwidth floor of a decode case: window bytes over the copy bandwidth, in microseconds."""
    return case.window_bytes / (copy_tbs * 1e12) * 1e6 if copy_tbs else math.inf

