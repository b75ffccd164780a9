"""Attention masks for every forward mode, in the kit's one window unit.

A mask is a ``torch.bool`` tensor ``[q_len, kv_len]``: row ``i`` is the ``i``-th query of the
forward pass, column ``c`` the ``c``-th key in the request's KV (oldest first), ``True`` where
the query attends that key. Every sliding-window test is :meth:`swa_kit.window.Window.attends`
applied to absolute positions; this module only decides *which positions* each row and column
stand for, per mode:

``prefill``  ``q_len == kv_len``; query ``i`` sits at position ``i``.
``extend``   queries after a cached prefix of ``kv_len - q_len`` tokens, aligned to the end of
             the KV: query ``i`` sits at ``kv_len - q_len + i``. An empty prefix is prefill.
``decode``   one query (``q_len == 1``) at position ``kv_len - 1``.
``verify``   target verify of a draft *chain*: the ``q_len`` draft tokens are the last ``q_len``
             KV entries, a chain is causal, so the mask is ``extend``'s.
``tree``     target verify of an EAGLE draft *tree* (topk > 1). ``parents[i]`` is the index of
             draft token ``i``'s parent among the draft tokens (``parents[i] < i``), or ``-1`` for a
             root that hangs directly off the committed prefix. The ``q_len`` draft tokens are
             the last ``q_len`` KV columns (column ``prefix_len + i`` holds draft token ``i``) but
             their *positions* are ``prefix_len + depth(i)`` (a root has depth 0), so siblings share
             a position. Draft token ``i`` attends committed key ``k < prefix_len`` when
             ``Window.attends(pos_i, k)``, and draft token ``j`` when ``j`` is ``i`` or one of its
             ancestors and ``Window.attends(pos_i, pos_j)``; never a sibling or a cousin.
``chunked``  Llama-4 chunked local attention, a contrast to a sliding window: the context is cut
             into fixed chunks of ``chunk`` positions and a query attends causally within its own
             chunk only (query aligned to the end of the KV, as in ``extend``). It has no
             sliding window, so ``window`` must be ``None``.

For long contexts :func:`block_view` gives, per (query block, KV block), how many (query, key)
pairs are attended, without building the dense mask. :meth:`ForwardMask.mask_mod` and
:meth:`ForwardMask.block_mask` export a mask to FlexAttention.
"""

from __future__ import annotations

import numbers
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from swa_kit import budget
from swa_kit.errors import PathUnavailableError, MaskError
from swa_kit.mask_modes import MODES as MODES  # defined apart so the CLI lists them without torch
from swa_kit.tables import plural
from swa_kit.window import MAX_KEYS, Window

WindowLike = Window | int | None
#: Peak bytes and seconds per cell of a dense mask (int64 position differences, then bools) and of a tile grid.
DENSE_CELL_BYTES, DENSE_CELL_SECONDS = 24, 20e-9
GRID_CELL_BYTES = 96
Progress = Callable[[Iterator[Any]], Iterable[Any]]  # wraps an iterator, e.g. functools.partial(tqdm, total=n)


def _int(name: str, value: Any, minimum: int, fix: str) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise MaskError(f"{name} must be a whole number, got {value!r}; {fix}")
    if int(value) < minimum:
        raise MaskError(f"{name} must be >= {minimum}, got {value!r}; {fix}")
    if int(value) > MAX_KEYS:  # positions are int64 in numpy and torch
        raise MaskError(f"{name} must be <= 2**62 = {MAX_KEYS} (64-bit positions), got {value!r}")
    return int(value)


def as_window(window: WindowLike) -> Window:
    """``window`` as a :class:`Window`: a Window, a number of keys, or None for no window."""
    return window if isinstance(window, Window) else Window(window)


def binary_tree_parents(n: int) -> tuple[int, ...]:
    """Parents of a complete binary draft tree of ``n`` tokens in breadth-first order (root -1)."""
    n = _int("tree size", n, 1, "a draft tree holds at least its root")
    return tuple((i - 1) // 2 for i in range(n))


def check_parents(parents: Sequence[int]) -> tuple[int, ...]:
    """Validate a draft tree's parent indices: ``-1`` for a root, else an earlier draft token."""
    if isinstance(parents, (str, bytes)) or not isinstance(parents, Sequence) or len(parents) == 0:
        raise MaskError(
            f"parents must be a non-empty list of ints, got {parents!r}; e.g. [-1, 0, 0, 1, 1] "
            "(-1 = root on the committed prefix, else the index of an earlier draft token)"
        )
    checked: list[int] = []
    for i, p in enumerate(parents):
        if not isinstance(p, numbers.Integral) or isinstance(p, bool) or not -1 <= p < i:
            raise MaskError(
                f"parents[{i}] = {p!r} is not a valid parent: draft token {i} needs -1 (a root on the "
                f"committed prefix) or the index of an earlier draft token (0..{i - 1}); list tokens "
                "parents first (breadth- or depth-first order)"
            )
        checked.append(int(p))
    return tuple(checked)


def tree_depths(parents: Sequence[int]) -> tuple[int, ...]:
    """Depth of each draft token (a root is 0); its position is ``prefix_len + depth``."""
    depth: list[int] = []
    for p in check_parents(parents):
        depth.append(0 if p < 0 else depth[p] + 1)
    return tuple(depth)


def tree_ancestors(parents: Sequence[int]) -> torch.Tensor:
    """``[n, n]`` bool: ``[i, j]`` when draft token ``j`` is ``i`` or one of its ancestors."""
    parents = check_parents(parents)
    n = len(parents)
    anc = torch.eye(n, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            anc[i] |= anc[p]  # parents come first, so anc[p] is complete
    return anc


@dataclass(frozen=True)
class ForwardMask:
    """One forward pass's attention pattern: validated once, then drawn densely, by blocks, or for Flex."""

    mode: str
    q_len: int
    kv_len: int
    window: Window
    parents: tuple[int, ...] | None = None
    chunk: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise MaskError(f"unknown mask mode {self.mode!r}; choose one of {', '.join(MODES)}")
        q = _int("q_len", self.q_len, 1, "a forward pass has at least one query")
        kv = _int("kv_len", self.kv_len, 1, "the KV holds at least the queries' own keys")
        object.__setattr__(self, "window", as_window(self.window))
        if q > kv:
            raise MaskError(
                f"q_len {q} > kv_len {kv}: queries are the last q_len KV entries, so kv_len must be "
                f">= q_len (kv_len = cached prefix + q_len)"
            )
        if self.mode == "prefill" and q != kv:
            raise MaskError(
                f"prefill has no cached prefix, so q_len ({q}) must equal kv_len ({kv}); "
                "use mode 'extend' for queries after a cached prefix"
            )
        if self.mode == "decode" and q != 1:
            raise MaskError(f"decode has exactly one query, got q_len {q}; use 'extend' or 'verify' for more")
        if self.mode == "tree":
            parents = check_parents(self.parents if self.parents is not None else binary_tree_parents(q))
            if len(parents) != q:
                raise MaskError(
                    f"tree has {len(parents)} parents but q_len is {q}: give one parent per draft token"
                )
            object.__setattr__(self, "parents", parents)
        elif self.parents is not None:
            raise MaskError(f"parents {self.parents!r} only apply to mode 'tree', not {self.mode!r}")
        if self.mode == "chunked":
            if self.chunk is None:
                raise MaskError("chunked local attention needs a chunk size (Llama-4 uses 8192), e.g. chunk=4")
            object.__setattr__(self, "chunk", _int("chunk", self.chunk, 1, "a chunk holds at least one position"))
            if self.window.keys is not None:
                raise MaskError(
                    f"chunked local attention has no sliding window, got window {self.window.keys!r}; "
                    "pass window=None (the chunk bounds the context instead)"
                )
        elif self.chunk is not None:
            raise MaskError(f"chunk {self.chunk!r} only applies to mode 'chunked', not {self.mode!r}")

    @property
    def prefix_len(self) -> int:
        """Committed/cached KV entries before the queries' own keys."""
        return self.kv_len - self.q_len

    @property
    def _tree_parents(self) -> tuple[int, ...]:
        """A tree's parents (``__post_init__`` fills them in for mode ``tree``; no other mode has them)."""
        if self.parents is None:
            raise MaskError(f"mode {self.mode!r} has no draft tree; only mode 'tree' has parents")
        return self.parents

    @property
    def _chunk_size(self) -> int:
        """A chunked mask's chunk (no other mode has one)."""
        if self.chunk is None:
            raise MaskError(f"mode {self.mode!r} has no chunk; only mode 'chunked' has a chunk size")
        return self.chunk

    def q_positions(self) -> torch.Tensor:
        """Absolute position of each query row (int64, ``[q_len]``)."""
        if self.mode == "tree":
            return self.prefix_len + torch.tensor(tree_depths(self._tree_parents), dtype=torch.int64)
        return torch.arange(self.prefix_len, self.kv_len, dtype=torch.int64)

    def k_positions(self) -> torch.Tensor:
        """Absolute position of each KV column (int64, ``[kv_len]``); differs from the index only in a tree."""
        if self.mode == "tree":
            return torch.cat([torch.arange(self.prefix_len, dtype=torch.int64), self.q_positions()])
        return torch.arange(self.kv_len, dtype=torch.int64)

    def dense(self) -> torch.Tensor:
        """The ``[q_len, kv_len]`` bool mask (bound: about 24 bytes a cell at its peak; refused past the limit)."""
        cells = self.q_len * self.kv_len
        budget.check(budget.Estimate(f"dense {self.q_len} x {self.kv_len} mask", cells * DENSE_CELL_BYTES,
                                     cells * DENSE_CELL_SECONDS), "use block_view() or a smaller mask")
        q = self.q_positions()[:, None]
        k = self.k_positions()[None, :]
        mask = self.window.attends(q, k)
        if self.mode == "chunked":
            mask = mask & (q // self._chunk_size == k // self._chunk_size)
        elif self.mode == "tree":
            visible = torch.ones(self.q_len, self.kv_len, dtype=torch.bool)
            visible[:, self.prefix_len:] = tree_ancestors(self._tree_parents)
            mask = mask & visible
        return mask

    def row_ranges(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """Per query row in ``[start, stop)`` the attended KV columns as ``[lo, hi)`` (int64 numpy); None for a tree.

        Every mode but ``tree`` attends one contiguous run of columns ending at the query itself;
        the run's start is :meth:`Window.first_keys` (or the chunk start), so no window rule is
        restated here.
        """
        if self.mode == "tree":
            return None
        stop = self.q_len if stop is None else stop
        q = np.arange(self.prefix_len + start, self.prefix_len + stop, dtype=np.int64)
        lo = q - q % self._chunk_size if self.mode == "chunked" else self.window.first_keys(q)
        return lo, q + 1

    def _run_ranges(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`row_ranges` of a contiguous mode; a tree, which has none, is refused."""
        ranges = self.row_ranges(start, stop)
        if ranges is None:
            raise MaskError("a draft tree attends no single run of columns per row; use dense() or block_view()")
        return ranges

    def block_view(self, block: int | tuple[int, int] = 128) -> "BlockView":
        """See :func:`block_view`."""
        return block_view(self, block)

    def mask_mod(self) -> Callable[..., torch.Tensor]:
        """A FlexAttention ``mask_mod(b, h, q_idx, kv_idx)`` for this mask.

        ``q_idx`` and ``kv_idx`` are row and column indices; the offset of queries aligned to the end
        of the KV is applied inside, so the same function serves prefill, extend, decode and verify.
        A tree captures its small ``[q_len, kv_len]`` mask and looks it up.
        """
        window, offset = self.window, self.prefix_len
        if self.mode == "tree":
            table = self.dense()

            def tree_mod(b: Any, h: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
                return table[q_idx, kv_idx]

            return tree_mod
        if self.mode == "chunked":
            chunk = self._chunk_size

            def chunked_mod(b: Any, h: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
                q_pos = q_idx + offset
                return window.attends(q_pos, kv_idx) & (q_pos // chunk == kv_idx // chunk)

            return chunked_mod

        def window_mod(b: Any, h: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
            return window.attends(q_idx + offset, kv_idx)

        return window_mod

    def block_mask(self, block: int | tuple[int, int] = 128, device: str | torch.device = "cpu") -> Any:
        """A FlexAttention ``BlockMask`` from :meth:`mask_mod` (``create_block_mask``, no batch/head axes)."""
        try:
            from torch.nn.attention.flex_attention import create_block_mask
        except ImportError as error:
            raise PathUnavailableError(
                f"this torch ({torch.__version__}) has no FlexAttention BlockMask ({error}); "
                "install torch >= 2.5 or use ForwardMask.dense()"
            ) from None
        return create_block_mask(self.mask_mod(), None, None, self.q_len, self.kv_len, device=device,
                                 BLOCK_SIZE=block)

    def describe(self) -> str:
        """One line naming the mode, sizes, positions and window."""
        keys = self.window.keys
        win = "no window (full causal)" if keys is None else f"window {plural(keys, 'key')}"
        extra = {"tree": f", parents {list(self.parents or ())}", "chunked": f", chunk {self.chunk}"}.get(self.mode, "")
        if self.mode == "chunked":
            win = "chunked local"
        queries = f"{self.q_len} queries" if self.q_len != 1 else "1 query"
        return (f"{self.mode}: {queries} x {plural(self.kv_len, 'key')} (prefix {self.prefix_len}), "
                f"{win}{extra}")

    def to_json(self) -> dict[str, Any]:
        """The mask and the positions its rows and columns stand for, as plain JSON values (builds it densely)."""
        return {"mode": self.mode, "q_len": self.q_len, "kv_len": self.kv_len, "window_keys": self.window.keys,
                "parents": None if self.parents is None else list(self.parents), "chunk": self.chunk,
                "q_positions": self.q_positions().tolist(), "k_positions": self.k_positions().tolist(),
                "mask": self.dense().int().tolist()}

    def to_text(self) -> str:
        """:meth:`describe`, then one line per query: its position, ``#`` per attended key, ``.`` per other key."""
        positions = self.q_positions().tolist()
        width = len(str(max(positions)))
        rows = ["".join("#" if cell else "." for cell in row) for row in self.dense().tolist()]
        return "\n".join([self.describe(), *(f"q {pos:>{width}} {row}" for pos, row in zip(positions, rows))])

    def blocks_to_json(self, block: int | tuple[int, int] = 128, progress: Progress | None = None) -> dict[str, Any]:
        """The block view as plain JSON values: per query block, the KV blocks it reads (never the dense mask)."""
        rows, tally = [], BlockTally(self, block)
        for row in tally.rows(progress):
            rows.append({"q_block": row.q_block, "kv_blocks": row.kv_blocks().tolist(), "pairs": row.pairs})
        return {"describe": self.describe(), "block": block, "summary": tally.summary(), "q_blocks": rows}

    def blocks_to_lines(self, block: int | tuple[int, int] = 128, progress: Progress | None = None) -> Iterator[str]:
        """:meth:`describe`, then per query block the KV blocks it reads, then the block view's summary.

        Streamed one tile row at a time: memory stays O(block row), at any size. ``progress`` wraps the
        rows' iterator (e.g. a tqdm bar).
        """
        yield self.describe()
        tally = BlockTally(self, block)
        for row in tally.rows(progress):
            kv = row.kv_blocks()
            contiguous = len(kv) and kv[-1] - kv[0] + 1 == len(kv)
            span = f"{kv[0]}..{kv[-1]}" if contiguous else ",".join(map(str, kv.tolist()))
            counts = f"{plural(len(kv), 'block')}, {plural(row.pairs, 'pair')}"
            yield f"  q block {row.q_block}: kv blocks {span} ({counts})"
        yield tally.summary()

    def blocks_to_text(self, block: int | tuple[int, int] = 128) -> str:
        """:meth:`blocks_to_lines` joined."""
        return "\n".join(self.blocks_to_lines(block))


def forward_mask(mode: str, q_len: int, kv_len: int, window: WindowLike, *,
              parents: Sequence[int] | None = None, chunk: int | None = None) -> ForwardMask:
    """Validate a forward pass's attention pattern (see the module docstring for each mode)."""
    return ForwardMask(mode, q_len, kv_len, as_window(window),
                    None if parents is None else check_parents(parents), chunk)


def mask_for(mode: str, q_len: int, kv_len: int, window: WindowLike, *,
             parents: Sequence[int] | None = None, chunk: int | None = None) -> torch.Tensor:
    """The dense ``[q_len, kv_len]`` bool mask of ``mode`` (the CLI's and the widget's entry)."""
    return forward_mask(mode, q_len, kv_len, window, parents=parents, chunk=chunk).dense()


def prefill_mask(seq_len: int, window: WindowLike) -> torch.Tensor:
    """Prefill of ``seq_len`` tokens: ``[seq_len, seq_len]``."""
    return mask_for("prefill", seq_len, seq_len, window)


def extend_mask(q_len: int, kv_len: int, window: WindowLike) -> torch.Tensor:
    """``q_len`` new tokens after a cached prefix of ``kv_len - q_len``: ``[q_len, kv_len]``."""
    return mask_for("extend", q_len, kv_len, window)


def decode_mask(kv_len: int, window: WindowLike) -> torch.Tensor:
    """One decode query at position ``kv_len - 1``: ``[1, kv_len]``."""
    return mask_for("decode", 1, kv_len, window)


def verify_chain_mask(prefix_len: int, draft_len: int, window: WindowLike) -> torch.Tensor:
    """Target verify of a ``draft_len`` chain after ``prefix_len`` committed tokens."""
    prefix_len = _int("prefix_len", prefix_len, 0, "the committed prefix may be empty but not negative")
    return mask_for("verify", draft_len, prefix_len + draft_len, window)


def verify_tree_mask(prefix_len: int, parents: Sequence[int], window: WindowLike) -> torch.Tensor:
    """Target verify of an EAGLE draft tree (``parents``, -1 = root) after ``prefix_len`` committed tokens."""
    prefix_len = _int("prefix_len", prefix_len, 0, "the committed prefix may be empty but not negative")
    parents = check_parents(parents)
    return mask_for("tree", len(parents), prefix_len + len(parents), window, parents=parents)


def chunked_mask(q_len: int, kv_len: int, chunk: int) -> torch.Tensor:
    """Llama-4 chunked local attention, queries aligned to the end of the KV."""
    return mask_for("chunked", q_len, kv_len, None, chunk=chunk)


def _summary_line(q_len: int, kv_len: int, bq: int, bk: int, needed: int, tiles: int, full: int, partial: int,
                  pairs: int) -> str:
    return (f"{q_len} x {kv_len} in {bq} x {bk} blocks: {needed} of {tiles} tiles needed ({full} full, "
            f"{partial} partial), {pairs:,} attended pairs of {q_len * kv_len:,}")


@dataclass(frozen=True)
class BlockView:
    """A mask at block granularity: ``counts[qb, kb]`` = attended (query, key) pairs in that tile.

    It holds the whole tile grid (``n_q_blocks * n_kv_blocks`` int64): for pictures and small masks.
    :class:`BlockTally` streams the same numbers one tile row at a time, at any size.
    """

    q_len: int
    kv_len: int
    block_q: int
    block_kv: int
    counts: np.ndarray  # int64 [n_q_blocks, n_kv_blocks]

    @property
    def tile_sizes(self) -> np.ndarray:
        """Cells in each tile (edge tiles are smaller)."""
        rows = np.minimum(self.block_q, self.q_len - np.arange(self.counts.shape[0]) * self.block_q)
        cols = np.minimum(self.block_kv, self.kv_len - np.arange(self.counts.shape[1]) * self.block_kv)
        return rows[:, None] * cols[None, :]

    @property
    def needed(self) -> np.ndarray:
        """bool ``[n_q_blocks, n_kv_blocks]``: the KV block must be read for that query block."""
        return self.counts > 0

    @property
    def full(self) -> np.ndarray:
        """Tiles attended in every cell (a kernel can skip the mask there)."""
        return self.counts == self.tile_sizes

    @property
    def partial(self) -> np.ndarray:
        """Tiles that need a per-element mask."""
        return self.needed & ~self.full

    def kv_blocks(self, q_block: int) -> np.ndarray:
        """Indices of the KV blocks query block ``q_block`` needs."""
        return np.flatnonzero(self.needed[q_block])

    @property
    def keys_per_q_block(self) -> np.ndarray:
        """Attended (query, key) pairs per query block."""
        return self.counts.sum(axis=1)

    @property
    def total_pairs(self) -> int:
        """Attended (query, key) pairs in the whole mask: the attention's compute in units of q.k."""
        return int(self.counts.sum())

    def q_blocks(self) -> list[dict[str, Any]]:
        """Per query block: its index, the KV blocks it reads and the (query, key) pairs it attends."""
        return [{"q_block": qb, "kv_blocks": self.kv_blocks(qb).tolist(), "pairs": int(self.keys_per_q_block[qb])}
                for qb in range(self.counts.shape[0])]

    def summary(self) -> str:
        return _summary_line(self.q_len, self.kv_len, self.block_q, self.block_kv, int(self.needed.sum()),
                             self.counts.size, int(self.full.sum()), int(self.partial.sum()), self.total_pairs)


def _block_sizes(block: int | tuple[int, int]) -> tuple[int, int]:
    pair = block if isinstance(block, tuple) else (block, block)
    if len(pair) != 2:
        raise MaskError(f"block must be an int or a (query, kv) pair, got {block!r}")
    rows, cols = (_int("block", b, 1, "blocks hold at least one row/column, e.g. 128") for b in pair)
    return rows, cols


def _tile_counts(mask: ForwardMask, bq: int, bk: int, qb0: int, qb1: int, kb0: int, kb1: int) -> np.ndarray:
    """Attended pairs per tile for query blocks ``[qb0, qb1)`` x KV blocks ``[kb0, kb1)`` of a contiguous mode.

    With each row's attended columns ``[lo_r, hi_r)`` (non-decreasing in r), the keys row r attends
    before column c are ``clip(min(c, hi_r) - lo_r, 0)``; summed over a query block this is a
    difference of prefix sums found by binary search, evaluated only at KV block boundaries.
    Memory is O(rows + tiles) of the slice.
    """
    row0, row1 = qb0 * bq, min(qb1 * bq, mask.q_len)
    lo, hi = mask._run_ranges(row0, row1)
    lo_cum = np.concatenate([[0], np.cumsum(lo)])
    hi_cum = np.concatenate([[0], np.cumsum(hi)])
    bounds = np.minimum(np.arange(kb0, kb1 + 1, dtype=np.int64) * bk, mask.kv_len)  # [kb1 - kb0 + 1]
    # Rows r with hi_r <= c contribute hi_r - lo_r; rows with lo_r < c < hi_r contribute c - lo_r.
    done = np.searchsorted(hi, bounds, side="right")  # rows with hi_r <= c (a prefix, hi sorted)
    begun = np.searchsorted(lo, bounds, side="left")  # rows with lo_r < c (a prefix, lo sorted)
    starts = np.arange(qb1 - qb0, dtype=np.int64)[:, None] * bq
    ends = np.minimum(starts + bq, row1 - row0)
    a = np.clip(done[None, :], starts, ends)
    b = np.clip(begun[None, :], starts, ends)
    before = (hi_cum[a] - hi_cum[starts]) + bounds[None, :] * (b - a) - (lo_cum[b] - lo_cum[starts])
    return np.diff(before, axis=1)


def block_view(mask: ForwardMask, block: int | tuple[int, int] = 128) -> BlockView:
    """Tile counts of ``mask``'s mask in ``block`` (or ``(block_q, block_kv)``) tiles, as one grid.

    Contiguous modes never build the mask (see :func:`_tile_counts`); memory is
    O(q_len + n_q_blocks * n_kv_blocks). A tree's mask is small and is reduced densely.
    :class:`BlockTally` gives the same numbers without the grid.
    """
    bq, bk = _block_sizes(block)
    nqb, nkb = -(-mask.q_len // bq), -(-mask.kv_len // bk)
    budget.check(budget.Estimate(f"block view grid of {nqb} x {nkb} tiles", nqb * nkb * GRID_CELL_BYTES,
                                 nqb * nkb * DENSE_CELL_SECONDS), "use a larger block, or BlockTally to stream it")
    if mask.mode != "tree":
        return BlockView(mask.q_len, mask.kv_len, bq, bk, _tile_counts(mask, bq, bk, 0, nqb, 0, nkb))
    dense = mask.dense().numpy()  # checks its bound first; a tree is small
    padded = np.zeros((nqb * bq, nkb * bk), dtype=np.int64)
    padded[: mask.q_len, : mask.kv_len] = dense
    return BlockView(mask.q_len, mask.kv_len, bq, bk, padded.reshape(nqb, bq, nkb, bk).sum(axis=(1, 3)))


@dataclass(frozen=True)
class BlockRow:
    """One query block's tiles: attended pairs in KV blocks ``first_kv_block ...`` (zeros beyond are not held)."""

    q_block: int
    first_kv_block: int
    counts: np.ndarray  # int64
    tile_sizes: np.ndarray  # cells per tile (edge tiles are smaller)

    def kv_blocks(self) -> np.ndarray:
        """Indices of the KV blocks this query block reads."""
        return self.first_kv_block + np.flatnonzero(self.counts)

    @property
    def pairs(self) -> int:
        return int(self.counts.sum())


class BlockTally:
    """The block view streamed one tile row at a time: at any size, never the dense mask nor the tile grid.

    :meth:`rows` yields each query block's :class:`BlockRow`, restricted to the KV blocks between its
    first and last attended key; :meth:`summary` (after :meth:`rows` ran, or running it) is
    :meth:`BlockView.summary`'s line. Rows are computed in groups whose slice of the grid holds at most
    ``GROUP_CELLS`` tiles, so memory is bounded whatever the mask's size.
    """

    GROUP_CELLS = 1 << 20

    def __init__(self, mask: ForwardMask, block: int | tuple[int, int] = 128) -> None:
        self.mask = mask
        self.bq, self.bk = _block_sizes(block)
        self.n_q_blocks, self.n_kv_blocks = -(-mask.q_len // self.bq), -(-mask.kv_len // self.bk)
        self.needed = self.full = self.pairs = 0
        self.done = False

    def span_bound(self) -> int:
        """At most this many KV blocks lie between one query block's first and last attended key."""
        keys = self.mask.window.keys if self.mask.mode != "chunked" else self.mask.chunk
        reach = self.mask.kv_len if keys is None or self.mask.mode == "tree" else min(keys, self.mask.kv_len)
        return min(self.n_kv_blocks, -(-(reach + self.bq) // self.bk) + 1)

    def rows(self, progress: Progress | None = None) -> Iterable[BlockRow]:
        """Each query block's :class:`BlockRow`, in order (``progress`` wraps the iterator, e.g. a tqdm bar)."""
        def each_row() -> Iterator[BlockRow]:
            for qb0, kb0, counts, sizes in self._slices():
                for i, c in enumerate(counts):
                    nonzero = np.flatnonzero(c)
                    first, last = int(nonzero[0]), int(nonzero[-1]) + 1
                    yield BlockRow(qb0 + i, kb0 + first, c[first:last], sizes[i, first:last])

        return (progress or iter)(each_row())

    def _slices(self) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """``(first query block, first KV block, counts, tile sizes)`` per slice of query blocks, tallied."""
        self.needed = self.full = self.pairs = 0
        for qb0, kb0, counts in self._count_slices():
            rows = np.minimum(self.bq, self.mask.q_len - np.arange(qb0, qb0 + len(counts)) * self.bq)
            cols = np.minimum(self.bk, self.mask.kv_len - np.arange(kb0, kb0 + counts.shape[1]) * self.bk)
            sizes = rows[:, None] * cols[None, :]
            self.needed += int(np.count_nonzero(counts))
            self.full += int(np.count_nonzero(counts == sizes))
            self.pairs += int(counts.sum())
            yield qb0, kb0, counts, sizes
        self.done = True

    def _count_slices(self) -> Iterator[tuple[int, int, np.ndarray]]:
        mask, bq, bk = self.mask, self.bq, self.bk
        if mask.mode == "tree":  # small (the draft tree), reduced densely
            yield 0, 0, block_view(mask, (bq, bk)).counts
            return
        group = self.n_q_blocks  # query blocks per slice: a slice spans about group * bq / bk + span KV blocks
        while group > 1 and group * min(self.n_kv_blocks, group * bq // bk + self.span_bound() + 1) > self.GROUP_CELLS:
            group //= 2
        for qb0 in range(0, self.n_q_blocks, group):
            qb1 = min(qb0 + group, self.n_q_blocks)
            last_row = min(qb1 * bq, mask.q_len)
            first_lo = int(mask._run_ranges(qb0 * bq, qb0 * bq + 1)[0][0])
            last_hi = int(mask._run_ranges(last_row - 1, last_row)[1][-1])
            kb0, kb1 = first_lo // bk, -(-last_hi // bk)
            yield qb0, kb0, _tile_counts(mask, bq, bk, qb0, qb1, kb0, kb1)

    def summary(self) -> str:
        """:meth:`BlockView.summary`'s line (tallied slice by slice unless :meth:`rows` already ran)."""
        if not self.done:
            deque(self._slices(), maxlen=0)  # tally every slice; the rows themselves are not needed here
        tiles = self.n_q_blocks * self.n_kv_blocks
        return _summary_line(self.mask.q_len, self.mask.kv_len, self.bq, self.bk, self.needed, tiles, self.full,
                             self.needed - self.full, self.pairs)
