"""Bounds on work: estimate memory and time from the shapes, and refuse what would pass this machine's limit.

Every command and public function whose work grows with its input builds an :class:`Estimate` from the
shapes before it allocates anything and passes it to :func:`check`. Work over the limit is refused with
one line naming the value, the estimate and a way out; the limits are a share of this machine's memory
and a few minutes, raised with ``SWA_KIT_MAX_MEMORY`` / ``SWA_KIT_MAX_SECONDS`` (or the commands'
``--max-memory`` / ``--max-seconds``). Time estimates are deliberately pessimistic rates for a busy
2-core machine: they bound the work, they do not predict it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Container, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from swa_kit.errors import BudgetError

MEMORY_ENV, SECONDS_ENV = "SWA_KIT_MAX_MEMORY", "SWA_KIT_MAX_SECONDS"
MEMORY_SHARE = 0.5  # of physical memory: leave the rest to the OS, the notebook server and the user
DEFAULT_SECONDS = 600.0  # ten minutes: longer work should be asked for explicitly
ANNOUNCE_SECONDS = 3.0  # work estimated past this states its bound on stderr and shows progress
FALLBACK_MEMORY = 8 << 30  # where the OS does not say (no sysconf)

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from ``'8GiB'``, ``'512M'`` or ``'1000000'`` (binary units)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS or float(match.group(1)) <= 0:
        raise BudgetError(f"cannot read memory size {text!r}: give e.g. 8GiB, 512MiB or a number of bytes")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_seconds(text: str) -> float:
    """Seconds (> 0) from ``'600'``."""
    try:
        value = float(text)
    except ValueError:
        raise BudgetError(f"cannot read seconds {text!r}: give a number > 0, e.g. 600") from None
    if not 0 < value < float("inf"):
        raise BudgetError(f"seconds {text!r} must be a finite number > 0, e.g. 600")
    return value


def machine_memory() -> int:
    """Physical memory of this machine in bytes."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return FALLBACK_MEMORY


_override: dict[str, float] = {}  # set by limits(): a command's --max-memory / --max-seconds


def memory_limit() -> int:
    """Bytes one piece of work may use: --max-memory, ``SWA_KIT_MAX_MEMORY``, else half of this machine's memory."""
    if "memory" in _override:
        return int(_override["memory"])
    text = os.environ.get(MEMORY_ENV)
    return parse_size(text) if text else int(machine_memory() * MEMORY_SHARE)


def seconds_limit() -> float:
    """Seconds one piece of work may take: --max-seconds, ``SWA_KIT_MAX_SECONDS``, else ten minutes."""
    if "seconds" in _override:
        return _override["seconds"]
    text = os.environ.get(SECONDS_ENV)
    return parse_seconds(text) if text else DEFAULT_SECONDS


@contextmanager
def limits(memory: int | None = None, seconds: float | None = None) -> Iterator[None]:
    """Use these limits (None: keep the current one) inside the block."""
    saved = dict(_override)
    _override.update({k: v for k, v in (("memory", memory), ("seconds", seconds)) if v is not None})
    try:
        yield
    finally:
        _override.clear()
        _override.update(saved)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.1f} s"
    if s < 2 * 3600:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.0f} h"
    return f"{s / 86400:.3g} days"


@dataclass(frozen=True)
class Estimate:
    """An upper bound on one piece of work: what it is, the bytes it holds at its peak and the seconds it takes."""

    what: str  # e.g. "probe of reference at 20000 keys"
    bytes: float
    seconds: float

    def describe(self) -> str:
        return f"{self.what}: about {human_bytes(self.bytes)} and {human_seconds(self.seconds)}"


def check(estimate: Estimate, way_out: str) -> Estimate:
    """Return ``estimate`` if it fits this machine's limits, else raise :class:`BudgetError` naming a way out."""
    memory, seconds = memory_limit(), seconds_limit()
    over = []
    if estimate.bytes > memory:
        over.append(f"memory limit {human_bytes(memory)} ({MEMORY_ENV} or --max-memory raises it)")
    if estimate.seconds > seconds:
        over.append(f"time limit {human_seconds(seconds)} ({SECONDS_ENV} or --max-seconds raises it)")
    if over:
        raise BudgetError(f"{estimate.describe()}, over the {' and the '.join(over)}; {way_out}")
    return estimate


def announce(estimate: Estimate) -> bool:
    """Whether ``estimate`` is long enough to state its bound and show a progress bar."""
    return estimate.seconds >= ANNOUNCE_SECONDS


# -- probe: one run per head_dim key positions, per mode, with a float64 [heads, q, kv] weight table -------------
PROBE_PASS_SECONDS = 0.5  # building the paged batch and launching the path, per pass
PROBE_CELL_SECONDS = {"cpu": 4e-6, "interpreted": 60e-6, "gpu": 0.05e-6}  # per (head, query, key) and pass
PROBE_CELL_BYTES = 40  # float64 weights + the path's float64 scores, mask and softmax per (head, query, key)
PROBE_WAY_OUT = "use a smaller --keys, --device cuda, or fewer --mode"


def probe_estimate(what: str, shapes: dict[str, tuple[int, int]], modes: Container[str], tiers: list[str],
                   device: object = "cpu", head_dim: int = 64, heads: int = 4) -> Estimate:
    """Bound of probing paths of ``tiers`` over ``shapes`` (mode -> (q_len, kv_len)) restricted to ``modes``."""
    on_gpu = str(device).startswith("cuda")
    seconds, peak = 0.0, 0
    for mode, (q_len, kv_len) in shapes.items():
        if mode not in modes:
            continue
        passes = -(-kv_len // head_dim)
        cells = heads * q_len * kv_len
        peak = max(peak, cells * PROBE_CELL_BYTES)
        for tier in tiers:
            rate = "gpu" if on_gpu else ("interpreted" if "interpreter" in tier else "cpu")
            seconds += passes * (PROBE_PASS_SECONDS + cells * PROBE_CELL_SECONDS[rate])
    return Estimate(what, peak, seconds)


# -- key-gap: a causal LM's forward over the whole prompt, twice, and greedy generation at both windows ----------
KEY_GAP_FLOPS_PER_SECOND = 2e9  # a busy 2-core machine in float32
KEY_GAP_LOGIT_COPIES = 7  # float32 logits, then per window float64 logits, log-softmax, its exp and the KL terms
KEY_GAP_WAY_OUT = "use a shorter prompt (--random-prompt N, a shorter --prompt or --prompt-file) or fewer --new-tokens"


def key_gap_estimate(tokens: int, new_tokens: int, *, vocab: int, layers: int, heads: int, kv_heads: int,
                     head_dim: int, weight_bytes: int) -> Estimate:
    """Bound of :func:`swa_kit.measure.key_gap.compare_window` over a prompt of ``tokens`` on a CPU.

    Peak: the weights, the [T, T] boolean mask and one layer's float32 [heads, T, T] scores (transformers builds
    both for a sliding window unless a flash kernel runs), the logits of both windows, and the KV cache of one
    generation. Time: two forwards over the prompt and ``new_tokens`` cached steps at each window.
    """
    total = tokens + new_tokens
    params = weight_bytes / 2  # a checkpoint holds at least 2 bytes a parameter (bf16): a bound, not a count
    square = tokens * total
    peak = (weight_bytes + square * (1 + 4 * heads) + tokens * vocab * 8 * KEY_GAP_LOGIT_COPIES
            + 2 * layers * kv_heads * head_dim * total * 4)
    flops = 2 * (2 * params * total + 4 * layers * heads * head_dim * square)
    return Estimate(f"key-gap over a prompt of {tokens:,} tokens and {new_tokens:,} new tokens", peak,
                    flops / KEY_GAP_FLOPS_PER_SECOND)
