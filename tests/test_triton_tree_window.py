"""Triton's extend kernel bounds an EAGLE tree's sliding window by flattened draft row, not tree depth (SGLang PR
#39287, open): the kit's verify plan judges a tree (topk > 1) wrong on sliding layers, and a chain right."""

from __future__ import annotations

import random

from swa_kit.engine.routing import plan
from swa_kit.engine.ways_out import TRITON_BACKEND
from swa_kit.launch.inputs import Launch
from swa_kit.measure.audit import audit


def _verify(topk: int):
    return plan("gpt-oss-20b", "verify", spec="eagle", topk=topk, backend="triton", strict=False)


def test_a_tree_is_judged_wrong_on_sliding_layers_and_a_chain_is_not():
    tree, chain = _verify(4), _verify(1)
    sliding = [p for p in tree.layers if p.kind == "sliding"]
    assert sliding and all(p.judgement and "not its depth" in p.judgement for p in sliding)
    assert all("--speculative-eagle-topk 1" in p.kit_verdict.ways_out[0] for p in sliding)
    assert not any(p.judgement for p in tree.layers if p.kind == "full")
    assert not any(p.judgement for p in chain.layers)


def _kernel_keys(prefix: int, sws: int, row: int, depth: int) -> set[int]:
    """Emulation of extend_attention.py _fwd_kernel's masks for one draft: the window prefix holds the newest
    min(prefix, sws) positions (update_sliding_window_buffer); a prefix key n (window coordinates) stays where
    window_prefix + row <= n + sws; a draft key stays where the tree mask says ancestor (checked separately)."""
    start = prefix - min(prefix, sws)
    return {start + n for n in range(prefix - start) if (prefix - start) + row <= n + sws}


def _meant_keys(prefix: int, sws: int, depth: int) -> set[int]:
    """The model's window for a draft at position prefix + depth: positions within sws of it (Triton's convention)."""
    return {k for k in range(prefix) if prefix + depth - k <= sws}


def test_a_draft_k_rows_past_its_depth_loses_its_k_oldest_window_keys():
    """The claim the verdict words, brute-forced over random trees and contexts (once the context fills the window)."""
    rng = random.Random(39287)
    for _ in range(300):
        sws, rows = rng.randint(4, 64), rng.randint(2, 10)
        parents = [-1] + [rng.randrange(r) for r in range(1, rows)]  # each draft's parent is an earlier row
        depth = [0] * rows
        for r in range(1, rows):
            depth[r] = depth[parents[r]] + 1
        prefix = rng.randint(sws + rows, 4 * sws)
        for r in range(rows):
            kept, meant = _kernel_keys(prefix, sws, r, depth[r]), _meant_keys(prefix, sws, depth[r])
            lost = sorted(meant - kept)
            assert kept <= meant and lost == sorted(meant)[:r - depth[r]], (sws, r, depth[r])
    # a chain (each row its own depth) loses nothing
    assert all(_kernel_keys(500, 127, d, d) == _meant_keys(500, 127, d) for d in range(8))


def test_triton_is_no_way_out_for_a_tree_launch():
    """Switching an aiter tree launch to Triton would bring this wrong verify route: the audit does not offer it."""
    tree = ("--attention-backend aiter --speculative-algorithm EAGLE --speculative-eagle-topk 4 "
            "--speculative-num-steps 3 --speculative-num-draft-tokens 8")
    ways = [w for f in audit(Launch.from_inputs(model="gemma3-27b", server_args=tree)).findings for w in f.ways_out]
    assert ways and TRITON_BACKEND.text not in ways
    chain = audit(Launch.from_inputs(model="gemma3-27b", server_args="--attention-backend aiter"))
    assert TRITON_BACKEND.text in [w for f in chain.findings for w in f.ways_out]
