"""The kit's Triton kernel (decode, chain verify, sinks) in Triton's CPU interpreter, against the float64 reference.

The interpreter is chosen when ``triton`` is first imported (Triton decorates its own
``tl.zeros``/``tl.max`` at that moment; see ``interpreted.interpreter_active``), and this
test process may already have imported triton compiled-mode. So the kernel runs in one
child process started with ``TRITON_INTERPRET=1``: the parent draws fresh random batches,
saves them, the child runs the kernel on each (output poisoned with NaN first), and the
parent compares with the reference, which never ran in the child.

Every slot no query attends holds NaN: a kernel that reads one key outside the window
fails loudly. bf16 is checked on the GPU only (tests/gpu): Triton's interpreter computes
``tl.dot`` of bf16 tiles wrongly, so the kit refuses bf16 there (tests/test_interpreted.py).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swa_kit.attention.batch import poison_unattended, random_paged_batch
from swa_kit.attention.kit import policy
from swa_kit.attention.kit.interpreted import interpreter_active
from swa_kit.attention.kit.policy import Edge, KernelLaunch, Merge
from swa_kit.attention.paths import get_path, run_path
from swa_kit.attention.reference import reference_attention
from swa_kit.attention.sinks import reference_with_sinks
from swa_kit.errors import PathUnavailableError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")


@pytest.fixture(scope="module")
def kit_path():
    """The host module, imported when a test needs it: importing it registers the path, and the
    CLI's generated help lists paths in registration order, so collection must not change that order."""
    from swa_kit.attention.kit import path

    return path


# (seq_lens, q_lens (None: decode), Hq, Hkv, head_dim, page_size, keys, forced splits, launch overrides, sinks)
CASES = [
    ([37, 5, 64], None, 4, 2, 16, 1, 7, None, {"block_n": 16}, False),  # GQA 2, windows shorter than most requests
    ([37, 5, 64], None, 4, 2, 16, 4, 7, 3, {"block_n": 16, "fused_merge": 0}, False),  # page size 4, 3 splits, 1 empty
    ([90, 1, 33], None, 8, 1, 32, 16, 40, 2, {"block_n": 16}, False),  # page size 16, GQA 8, a one-token request
    ([90, 70], None, 8, 8, 32, 16, None, 4, {"block_n": 16, "fused_merge": 0}, False),  # no window (causal), MHA
    ([50, 64], None, 4, 4, 64, 1, 1, None, {"block_n": 16}, False),  # window of one key: the query's own
    ([100, 17, 64], None, 16, 2, 16, 16, 200, 5, {"block_n": 32}, False),  # window wider than every request, GQA 8
    ([128, 96], None, 4, 1, 32, 1, 64, 2, {"block_n": 32}, False),  # GQA 4, window a whole tile, two splits
    ([37, 9, 64], [3, 1, 8], 8, 2, 16, 1, 7, None, {"block_n": 16}, False),  # ragged verify, windows under the chains
    ([70, 12, 40], [8, 2, 5], 4, 1, 16, 4, 9, 3, {"block_n": 16, "fused_merge": 0}, False),  # verify, p4, 3 splits
    ([90, 33], [2, 8], 8, 8, 32, 16, None, 2, {"block_n": 16}, False),  # verify with no window: causal within the chunk
    ([40, 8], [4, 8], 4, 2, 16, 1, 1, None, {"block_n": 16}, False),  # window of one key: each draft sees only itself
    ([60, 20, 45], None, 8, 1, 16, 16, 11, 2, {"block_n": 16, "fused_merge": 0}, True),  # sinks, decode, split
    ([60, 20, 45], [5, 2, 8], 8, 2, 16, 1, 11, None, {"block_n": 16}, True),  # sinks in verify, one split
    ([40, 70], [8, 5], 8, 1, 16, 16, 9, 2, {"block_n": 16}, False),  # 64 rows (8 drafts x GQA 8)
    ([80, 9, 61], [8, 7, 3], 4, 2, 16, 1, 40, 3, {"block_n": 16}, False),  # middle over three splits, edges in split 0
    ([30, 12], [8, 6], 4, 2, 16, 4, 8, 2, {"block_n": 16}, True),  # window one past the drafts: a one-key middle, sinks
    ([50, 8, 20], [8, 8, 1], 4, 1, 16, 1, 3, None, {"block_n": 16}, False),  # window under the drafts: all edge
    ([70, 33], None, 4, 2, 16, 16, 20, 2, {"block_n": 16, "rows": 32}, True),  # decode in a taller tile than it needs
    # head_dim <= 64 prefetches the edge tile and folds it in after the walk; wider heads fold it in before:
    ([80, 9, 61], [8, 7, 3], 4, 2, 16, 1, 40, 3, {"block_n": 16, "edge_prefetch": 0}, False),  # edges before the walk
    ([50, 8, 20], [8, 8, 1], 4, 1, 16, 4, 3, None, {"block_n": 16, "edge_prefetch": 0}, True),  # all edge, before
    ([40, 70], [8, 5], 8, 1, 16, 16, 9, 2, {"block_n": 16, "edge_prefetch": 0}, False),  # 64 rows, edges before
    ([37, 5, 64], None, 4, 2, 16, 4, 40, 3, {"block_n": 16, "fused_merge": 1}, True),  # merged by the last split
    ([37, 5, 64], None, 4, 2, 16, 4, 70, 5, {"block_n": 16, "fused_merge": 1}, False),  # 5 merged as 8, empty ones
    ([80, 9, 61], [8, 7, 3], 4, 2, 16, 1, 40, 3, {"block_n": 16, "fused_merge": 1, "edge_prefetch": 0}, False),
    ([70, 12, 40], [8, 2, 5], 8, 1, 16, 4, 30, 3, {"block_n": 16, "fused_merge": 1, "edge_prefetch": 1}, True),
    # the edge tile in a split of its own (the last), beside the middle's: forced splits count the middle's
    ([80, 9, 61], [8, 7, 3], 4, 2, 16, 1, 40, 2, {"block_n": 16, "edge_split": 1, "fused_merge": 1}, True),
    ([70, 12, 40], [8, 2, 5], 8, 1, 16, 4, 9, 3, {"block_n": 16, "edge_split": 1, "fused_merge": 0}, False),
    ([50, 8, 20], [8, 8, 1], 4, 1, 16, 1, 3, 2, {"block_n": 16, "edge_split": 1, "edge_prefetch": 1}, True),
    ([60, 20, 45], [5, 2, 8], 8, 2, 16, 1, 11, 1, {"block_n": 16, "edge_split": 1}, True),  # one split: no edge's own
    ([40, 70], [8, 5], 8, 1, 16, 16, 30, 2, {"block_n": 16, "edge_split": 1, "edge_prefetch": 0}, False),
    # the edge tile as the walk's last iteration (split 0's), masked per query there only
    ([80, 9, 61], [8, 7, 3], 4, 2, 16, 1, 40, 3, {"block_n": 16, "edge_in_walk": 1, "edge_prefetch": 0}, False),
    ([50, 8, 20], [8, 8, 1], 4, 1, 16, 4, 3, None, {"block_n": 16, "edge_in_walk": 1, "edge_prefetch": 0}, True),
    ([40, 70], [8, 5], 8, 1, 16, 16, 9, 2, {"block_n": 16, "edge_in_walk": 1, "edge_prefetch": 0, "fused_merge": 1},
     False),
    ([37, 9, 64], [3, 1, 8], 8, 2, 16, 1, 7, None, {"block_n": 16, "edge_in_walk": 1, "edge_prefetch": 0}, True),
    ([90, 33], [2, 8], 8, 8, 32, 16, None, 2, {"block_n": 32, "edge_in_walk": 1, "edge_prefetch": 0}, False),
    # a verify addresses K and V with 32-bit offsets where they fit, a decode with 64-bit ones: each the other way too
    ([37, 5, 64], None, 4, 2, 16, 4, 40, 3, {"block_n": 16, "int32_offsets": 1, "fused_merge": 1}, True),
    ([80, 9, 61], [8, 7, 3], 4, 2, 16, 1, 40, 3, {"block_n": 16, "int32_offsets": 0, "edge_in_walk": 1,
                                                  "edge_prefetch": 0}, False),
    ([70, 12, 40], [8, 2, 5], 8, 1, 16, 4, 30, 3, {"block_n": 16, "int32_offsets": 0, "edge_prefetch": 1}, True),
    # a verify's walk loads whole tiles unmasked (the chunk's last key again past its end), a decode's masked: each
    # the other way too, and with the edge tile walked last (its positions clamped to the request's last key)
    ([37, 5, 64], None, 4, 2, 16, 4, 40, 3, {"block_n": 16, "clamped_walk": 1}, True),
    ([90, 1, 33], None, 8, 1, 32, 16, 40, 2, {"block_n": 16, "clamped_walk": 1, "int32_offsets": 1}, False),
    ([80, 9, 61], [8, 7, 3], 4, 2, 16, 1, 40, 3, {"block_n": 16, "clamped_walk": 0}, False),
    ([50, 8, 20], [8, 8, 1], 4, 1, 16, 4, 3, None, {"block_n": 16, "clamped_walk": 0, "edge_in_walk": 1,
                                                    "edge_prefetch": 0}, True),
    ([40, 70], [8, 5], 8, 1, 16, 16, 9, 2, {"block_n": 16, "clamped_walk": 1, "int32_offsets": 0, "edge_in_walk": 1,
                                            "edge_prefetch": 0}, False),
]


def _worker(path: str) -> None:
    """Child process: run the kernel on every saved batch; the parent checks the outputs."""
    from swa_kit.attention.kit import path as kit_path

    assert interpreter_active(), "the child must be started with TRITON_INTERPRET=1"
    payload = torch.load(path, weights_only=False)  # our own file: AttentionBatch objects
    outputs = []
    for batch, keys, splits, overrides, sinks in payload["cases"]:
        plan = kit_path.plan_batch(batch, keys, sinks=sinks, splits=splits, **overrides)
        out = torch.full_like(batch.q, float("nan"))
        plan.run(batch.q, out)
        outputs.append((out, plan.launch.splits, plan.launch.chunk))
    torch.save({"outputs": outputs, "kernel_file": kit_path.kernel.__file__}, path + ".out")


@pytest.fixture(scope="module")
def interpreted_runs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    cases = []
    for seq_lens, q_lens, hq, hkv, dim, page, keys, splits, overrides, sinks in CASES:
        batch = random_paged_batch(q_lens or [1] * len(seq_lens), seq_lens, num_q_heads=hq, num_kv_heads=hkv,
                                   head_dim=dim, page_size=page, spare_pages=0, dtype=torch.float16, generator=gen)
        poison_unattended(batch, keys)
        cases.append((batch, keys, splits, overrides, torch.randn(hq, generator=gen) * 3 if sinks else None))
    path = str(tmp_path_factory.mktemp("kit_triton") / "cases.pt")
    torch.save({"cases": cases}, path)
    import swa_kit
    from swa_kit.attention.kit import kernel

    # The child imports the kit this process imported (a checkout may differ from the installed kit): its module-level
    # imports run before anything it could do to sys.path.
    checkout = str(Path(swa_kit.__file__).resolve().parents[1])
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))}
    child = subprocess.run([sys.executable, __file__, path], env=env, capture_output=True, text=True, timeout=600,
                           check=False)
    assert child.returncode == 0, child.stderr[-3000:]
    result = torch.load(path + ".out")
    assert Path(result["kernel_file"]).resolve() == Path(kernel.__file__).resolve(), "the child ran another kit"
    return [(case, out) for case, out in zip(cases, result["outputs"], strict=True)]


@pytest.mark.parametrize("index", range(len(CASES)))
def test_interpreted_kernel_matches_reference(interpreted_runs: list[tuple], index: int) -> None:
    (batch, keys, splits, overrides, sinks), (out, used_splits, _) = interpreted_runs[index]
    ref = reference_attention(batch, keys).out if sinks is None else reference_with_sinks(batch, keys, sinks)
    assert not torch.isnan(out).any(), "an output element was never written, or a poisoned slot leaked in"
    error = float((out.double() - ref).norm() / ref.norm())
    assert error < 2e-3, f"case {CASES[index]}: relative error {error:.2e}"
    if splits is not None:
        own_edge = overrides.get("edge_split", 0) and splits > 1  # where the window is split, on top of the middle's
        assert used_splits == splits + own_edge


def test_split_count_follows_the_window_not_the_context() -> None:
    for window in (128, 1024, 4096):
        counts = {policy.choose_splits(32 * 8, min(window, ctx), 132) for ctx in (8192, 32768, 131072)}
        assert len(counts) == 1, f"window {window}: splits change with the context: {counts}"
    splits, chunk = policy.choose_splits(1 * 8, 4096, 132)
    assert splits > 1 and splits * chunk >= 4096 and (splits - 1) * chunk < 4096 and chunk % policy.BLOCK_N == 0


def test_chunks_cover_the_window_exactly_once() -> None:
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    for _ in range(200):
        pairs = int(torch.randint(1, 600, (1,), generator=gen))
        window = int(torch.randint(1, 9000, (1,), generator=gen))
        for floor in (policy.MIN_CHUNK, policy.BLOCK_N):  # the floor of a latency-bound batch: one tile
            for per_sm, whole_wave in ((policy.PROGRAMS_PER_SM, False), (policy.PROGRAMS_PER_SM, True), (4, True)):
                splits, chunk = policy.choose_splits(pairs, window, 132, programs_per_sm=per_sm, min_chunk=floor,
                                                     whole_wave=whole_wave)
                assert (splits - 1) * chunk < window <= splits * chunk
                assert splits == 1 or chunk >= floor  # no chunk shorter than the floor
                if whole_wave:  # never a second, partial wave
                    assert splits == 1 or pairs * splits <= per_sm * 132


def test_a_verify_keeps_its_register_cap_only_where_it_was_measured() -> None:
    """The grid's head shapes, whose accumulator takes 32 registers a thread, keep a verify's cap; a taller or wider
    query tile runs uncapped (tests/test_kernel_resources.py compiles one that the cap cannot hold). Decode never
    has one."""
    cap = policy.MAX_REGISTERS
    for dim, group, want in ((128, 4, cap), (256, 2, cap), (64, 8, cap), (64, 4, cap), (256, 8, 0), (256, 4, 0),
                             (128, 16, 0)):
        chosen = policy.launch_policy(dim, group, policy.MAX_QUERIES)
        assert chosen.max_registers == want, (dim, group, chosen.rows)
        assert policy.launch_policy(dim, group, 1).max_registers == 0
    assert policy.accumulator_registers(64, 256) == 128


def test_a_batch_splits_into_one_wave_of_two_programs_per_sm_and_small_grids_get_two_buffers(kit_path,
                                                                                             monkeypatch) -> None:
    """On an H200's 132 SMs (8 KV heads, head_dim 64): decode and verify split their window into at most one wave of
    two programs per SM; where the grid stays within that and a chunk holds more than one tile, the launch gets two
    K/V buffers (DEEP_STAGES) and no register cap. B 128 keeps one buffer and a verify's cap; a latency-bound batch
    (B 1) splits as before, a verify's edge tile one program more."""
    monkeypatch.setattr(kit_path, "_num_sms", lambda device: 132)
    deep, cap = policy.DEEP_STAGES, policy.MAX_REGISTERS
    expected = {  # (B, window, q_len): (splits, stages, register cap)
        (8, 4096, 1): (4, deep, 0), (8, 4096, 8): (4, deep, 0), (8, 1024, 8): (4, deep, 0),
        (32, 4096, 1): (1, deep, 0), (32, 4096, 8): (1, deep, 0),
        (128, 4096, 1): (1, 2, 0), (128, 4096, 8): (1, 2, cap),
        (8, 128, 1): (1, 2, 0),  # one tile (128 keys at head_dim 64): nothing to overlap
        (1, 4096, 1): (32, 2, 0), (1, 4096, 8): (33, 2, cap)}
    for (batch_size, window, q_len), want in expected.items():
        batch = random_paged_batch([q_len] * batch_size, [5000] * batch_size, num_q_heads=64, num_kv_heads=8,
                                   head_dim=64, page_size=16, dtype=torch.float16,
                                   generator=torch.Generator().manual_seed(4))
        launch = kit_path.plan_batch(batch, window).launch
        got = (launch.splits, launch.num_stages, launch.max_registers)
        assert got == want, f"B {batch_size} W {window} q_len {q_len}: (splits, stages, cap) {got}, want {want}"
        if (batch_size, q_len) == (8, 8):  # an explicit stage count or cap is taken as given
            assert kit_path.plan_batch(batch, window, num_stages=3).launch.num_stages == 3
            assert kit_path.plan_batch(batch, window, max_registers=cap).launch.max_registers == cap
            assert kit_path.plan_batch(batch, window, deep_pipeline=False).launch.num_stages == 2
    for q_len in (1, 8):
        assert policy.launch_policy(64, 8, q_len).whole_wave
        assert not policy.launch_policy(64, 8, q_len, latency_bound=True).whole_wave
        assert not policy.launch_policy(64, 8, q_len, latency_bound=True).deep_pipeline


def test_two_buffers_only_where_the_grid_is_small_and_a_chunk_has_tiles_to_overlap(monkeypatch) -> None:
    chosen = policy.launch_policy(128, 4, 1)
    tile, most = chosen.block_n, policy.DEEP_PROGRAMS_PER_SM * 132
    assert policy.runs_deep(chosen, most, 2 * tile, 132)
    assert not policy.runs_deep(chosen, most + 1, 2 * tile, 132)  # a third program on some SM
    assert not policy.runs_deep(chosen, most, tile, 132)  # one tile a chunk
    assert not policy.runs_deep(dataclasses.replace(chosen, deep_pipeline=False), 8, 2 * tile, 132)
    monkeypatch.setattr(torch.version, "hip", "6.4")  # ROCm: never measured, and two buffers outgrow an MI300's LDS
    assert not policy.launch_policy(128, 4, 1).deep_pipeline


def test_a_verify_with_two_buffers_walks_its_edge_tile_last(kit_path, monkeypatch) -> None:
    """At head_dim 128 and 256 a verify whose launch gets two K/V buffers walks its edge tile as the loop's last
    iteration; with one buffer, at GPT-OSS's head_dim 64 (edge prefetched) and in decode it does not. An explicit
    choice wins, and the edge tile cannot be placed two ways at once."""
    monkeypatch.setattr(kit_path, "_num_sms", lambda device: 132)

    def launch(batch_size: int, hq: int, hkv: int, dim: int, q_len: int, **overrides: int) -> KernelLaunch:
        kv = torch.empty(16, hkv, dim, dtype=torch.float16)  # the plan never reads the pool: a stand-in will do
        q_start = torch.arange(batch_size + 1) * q_len
        return kit_path.plan_decode(kv, kv, torch.zeros(1, dtype=torch.int32), torch.zeros(batch_size),
                                    torch.full((batch_size,), 5000), 16, 4096, 0.1, hq, q_start=q_start,
                                    max_q_len=q_len, max_seq_len=5000, **overrides).launch

    expected = {  # (B, Hq, Hkv, D, q_len): (two buffers, where the edge goes)
        (8, 32, 8, 128, 8): (True, Edge.IN_WALK), (32, 32, 8, 128, 8): (True, Edge.IN_WALK),
        (8, 32, 16, 256, 8): (True, Edge.IN_WALK), (128, 32, 8, 128, 8): (False, Edge.BEFORE),
        (32, 32, 16, 256, 8): (False, Edge.BEFORE), (8, 64, 8, 64, 8): (True, Edge.PREFETCH),
        (8, 32, 8, 128, 1): (True, Edge.NONE)}
    for (batch_size, hq, hkv, dim, q_len), want in expected.items():
        got = launch(batch_size, hq, hkv, dim, q_len)
        assert (got.num_stages == policy.DEEP_STAGES, got.edge) == want, (batch_size, hq, dim, q_len)
    assert launch(8, 32, 8, 128, 8, edge_in_walk=0).edge == Edge.BEFORE
    assert launch(128, 32, 8, 128, 8, edge_in_walk=1).edge == Edge.IN_WALK  # one buffer, but asked for
    assert launch(8, 32, 8, 128, 8, edge_prefetch=1).edge == Edge.PREFETCH  # the edge placed otherwise, explicitly
    with pytest.raises(ValueError, match="edge_in_walk=1 places the edge tile itself: give edge_prefetch=0"):
        launch(8, 64, 8, 64, 8, edge_in_walk=1)  # GPT-OSS prefetches its edge tile
    monkeypatch.setattr(torch.version, "hip", "6.4")  # no second buffer on ROCm, so no edge in the walk
    assert not policy.launch_policy(128, 4, 8).edge_in_walk


def test_the_edge_goes_where_its_switches_say_in_their_order() -> None:
    """Every combination of the three edge switches, a split window or not, two buffers or not: in the walk where
    asked and the launch has two buffers (whatever the buffers when asked explicitly, alone), else a program of its
    own where the window is split, else prefetched where asked, else before the walk; decode has no edge."""
    base = policy.launch_policy(128, 4, 8)
    for prefetch, split, in_walk, splits, deep in itertools.product((False, True), (False, True), (False, True), (1, 3),
                                                                    (False, True)):
        chosen = dataclasses.replace(base, edge_prefetch=prefetch, edge_split=split, edge_in_walk=in_walk)
        alone = not (prefetch or split)
        want = (Edge.IN_WALK if in_walk and deep and alone else Edge.OWN_SPLIT if split and splits > 1
                else Edge.PREFETCH if prefetch else Edge.BEFORE)
        assert policy.place_edge(chosen, True, splits, deep) == want, (prefetch, split, in_walk, splits, deep)
        assert policy.place_edge(chosen, False, splits, deep) == Edge.NONE
        if in_walk and alone:
            assert policy.place_edge(chosen, True, splits, False, {"edge_in_walk"}) == Edge.IN_WALK


def test_a_verify_addresses_k_and_v_in_32_bits_where_the_buffers_allow(kit_path) -> None:
    """The policy: 32-bit offsets for a verify, 64-bit for decode; a buffer of 2**31 elements or more takes 64-bit
    offsets whatever the policy, and asking for 32-bit ones there is refused by name (they would wrap)."""
    limit = policy.INT32_OFFSETS_LIMIT
    verify, decode = policy.launch_policy(128, 4, 8), policy.launch_policy(128, 4, 1)
    assert policy.addresses_in_int32(verify, limit - 1)
    assert not policy.addresses_in_int32(verify, limit)  # the policy's choice, where the buffers allow it
    assert not policy.addresses_in_int32(decode, 1000)
    asked = policy.with_overrides(decode, {"int32_offsets": 1})
    assert policy.addresses_in_int32(asked, limit - 1, {"int32_offsets"})
    with pytest.raises(ValueError, match=f"int32_offsets=1: a K or V buffer whose offsets reach {limit} elements "
                       "needs 64-bit ones"):
        policy.addresses_in_int32(asked, limit, {"int32_offsets"})
    assert kit_path.plan_batch(_batch(q_lens=(3, 1)), 4).launch.int32_offsets
    assert not kit_path.plan_batch(_batch(), 4).launch.int32_offsets


def test_a_verify_walks_whole_tiles_unmasked_and_a_decode_masked(kit_path) -> None:
    """The policy (v13): a verify's walk loads unmasked, a decode's masked, and an explicit choice is taken as given
    (the interpreter cases above check both ways against the reference, with NaN outside every window)."""
    assert policy.launch_policy(128, 4, 8).clamped_walk
    assert not policy.launch_policy(128, 4, 1).clamped_walk
    assert kit_path.plan_batch(_batch(q_lens=(3, 1)), 4).policy.clamped_walk
    assert not kit_path.plan_batch(_batch(), 4).policy.clamped_walk
    assert kit_path.plan_batch(_batch(), 4, clamped_walk=1).policy.clamped_walk
    assert not kit_path.plan_batch(_batch(q_lens=(3, 1)), 4, clamped_walk=0).policy.clamped_walk


def test_a_strided_buffer_is_judged_by_how_far_its_offsets_reach(kit_path) -> None:
    """K as one half of a fused K/V buffer holds half its elements but is addressed across all of it: the 32-bit
    decision must count the reach, not the elements, or a large enough view would wrap silently."""
    fused = torch.zeros(5, 2, 3, 8)  # [slots, K|V, heads, dim]
    k = fused[:, 0]
    assert k.numel() == 120 and kit_path.addressed_elements(k) == 1 + 4 * 48 + 2 * 8 + 7
    assert kit_path.addressed_elements(fused[:, 1]) == 1 + 4 * 48 + 2 * 8 + 7  # from its own first element
    assert kit_path.addressed_elements(k.contiguous()) == k.numel()


def _batch(q_lens=(1, 1), head_dim=16, dtype=torch.float16):
    return random_paged_batch(list(q_lens), [20, 9], num_q_heads=4, num_kv_heads=2, head_dim=head_dim, dtype=dtype,
                              generator=torch.Generator().manual_seed(1))


def test_refuses_what_it_cannot_compute(kit_path) -> None:
    with pytest.raises(PathUnavailableError, match="up to 8 queries; request 0 has q_len 9"):
        kit_path.plan_batch(_batch(q_lens=[9, 1]), 4)
    batch = _batch()
    with pytest.raises(PathUnavailableError, match="sinks of shape"):
        kit_path.plan_batch(batch, 4, sinks=torch.zeros(3))
    batch.tree_masks = [torch.ones(1, 20, dtype=torch.bool), torch.ones(1, 9, dtype=torch.bool)]
    with pytest.raises(PathUnavailableError, match="tree masks"):
        kit_path.plan_batch(batch, 4)
    with pytest.raises(PathUnavailableError, match="dtype"):
        kit_path.plan_batch(_batch(dtype=torch.float32), 4)
    with pytest.raises(PathUnavailableError, match="head_dim 24"):
        kit_path.plan_batch(_batch(head_dim=24), 4)
    with pytest.raises(ValueError, match="keys"):
        kit_path.plan_batch(_batch(), 0)
    with pytest.raises(ValueError, match="rows=8: the query tile needs a power of two >= 16"):
        kit_path.plan_batch(_batch(), 4, rows=8)
    with pytest.raises(ValueError, match="rows=24"):
        kit_path.plan_batch(_batch(), 4, rows=24)
    with pytest.raises(ValueError, match=r"unknown launch override\(s\) \['tile'\]"):
        kit_path.plan_batch(_batch(), 4, tile=64)
    for name, bad in (("num_warps", 0), ("num_stages", -1), ("max_registers", -8), ("programs_per_sm", 1.5),
                      ("block_n", True)):
        with pytest.raises(ValueError, match=f"launch override {name}={bad!r}: give an int >= "):
            kit_path.plan_batch(_batch(), 4, **{name: bad})
    for name, bad in (("edge_prefetch", 2), ("fused_merge", -1), ("fused_merge", 1.0), ("whole_wave", 2),
                      ("edge_split", 3), ("deep_pipeline", 2), ("deep_pipeline", -1), ("edge_in_walk", 2),
                      ("int32_offsets", 2), ("clamped_walk", "1"), ("clamped_walk", -1)):
        with pytest.raises(ValueError, match=f"launch override {name}={bad!r}: give a bool or an int in 0..1"):
            kit_path.plan_batch(_batch(), 4, **{name: bad})
    for switch in ("edge_split", "edge_in_walk"):  # _batch() is decode: it has no edge tile to place
        with pytest.raises(ValueError, match=rf"{switch}=1 applies to a verify \(max_q_len > 1\)"):
            kit_path.plan_batch(_batch(), 4, **{switch: 1})
    for bad in (0.0, -0.125, float("nan"), float("inf")):
        batch = _batch()
        batch.sm_scale = bad
        with pytest.raises(PathUnavailableError, match=f"sm_scale {bad!r}: the kernel needs a finite softmax "
                                                          "scale > 0"):
            kit_path.plan_batch(batch, 4)
    with pytest.raises(ValueError, match="block_n=24: a key tile needs a power of two >= 16"):
        kit_path.plan_batch(_batch(), 4, block_n=24)
    for bad in (0, -2, 2.0):
        with pytest.raises(ValueError, match=f"splits={bad!r}: give an int >= 1"):
            kit_path.plan_batch(_batch(), 4, splits=bad)
    assert kit_path.plan_batch(_batch(), 4, max_registers=0, splits=1).launch.max_registers == 0  # 0: no cap


def test_latency_bound_batches_split_to_one_tile_and_merge_in_a_second_kernel(kit_path, monkeypatch) -> None:
    """On an H200's 132 SMs: B 1 (8 or 16 KV heads) cuts its window into one-tile chunks and leaves the merge to
    the merge kernel; B 8 keeps chunks of at least MIN_CHUNK keys and fuses the merge into the last split."""
    monkeypatch.setattr(kit_path, "_num_sms", lambda device: 132)
    for batch_size, hkv, dim in ((1, 8, 128), (1, 16, 256), (8, 8, 128), (8, 16, 256)):
        bound = policy.is_latency_bound(batch_size * hkv, 132)
        assert bound == (batch_size == 1)
        batch = random_paged_batch([1] * batch_size, [3000] * batch_size, num_q_heads=32, num_kv_heads=hkv,
                                   head_dim=dim, dtype=torch.float16, generator=torch.Generator().manual_seed(2))
        plan = kit_path.plan_batch(batch, 1024)
        tile = policy.block_n_for(dim)
        want = policy.choose_splits(batch_size * hkv, 1024, 132, tile, min_chunk=tile if bound else 256,
                                    whole_wave=not bound)
        assert (plan.launch.splits, plan.launch.chunk) == want and plan.launch.splits > 1
        assert (plan.locks is None) == bound
        chosen = policy.launch_policy(dim, 32 // hkv, 1, latency_bound=bound)
        assert policy.split_window(chosen, batch_size * hkv, 1024, 132) == (
            *want, Merge.KERNEL if bound else Merge.LAST_SPLIT)
        assert policy.split_window(chosen, batch_size * hkv, 1024, 132, splits=1)[2] == Merge.NONE  # nothing to merge
        if bound:
            assert plan.launch.chunk < policy.MIN_CHUNK
            assert plan.launch.splits > policy.choose_splits(batch_size * hkv, 1024, 132, tile)[0]
        else:
            assert plan.locks.shape == (batch_size * hkv,) and not plan.locks.any()


def test_a_latency_bound_verify_gives_its_edge_tile_a_program_of_its_own(kit_path, monkeypatch) -> None:
    """On 132 SMs: at B 1 a verify whose window is split anyway runs its edge tile as one more split, the last; a
    window that fits one program stays unsplit, and a batch that fills the GPU keeps the edge in split 0."""
    monkeypatch.setattr(kit_path, "_num_sms", lambda device: 132)
    gen = torch.Generator().manual_seed(4)
    for batch_size, keys, dim, own_edge in ((1, 1024, 128, True), (1, 128, 256, True), (1, 128, 64, False),
                                            (8, 1024, 128, False)):
        q_lens, hkv = [2 + b % 7 for b in range(batch_size)], 16 if dim == 256 else 8
        batch = random_paged_batch(q_lens, [3000] * batch_size, num_q_heads=32, num_kv_heads=hkv, head_dim=dim,
                                   dtype=torch.float16, generator=gen)
        launch = kit_path.plan_batch(batch, keys).launch
        chosen = policy.launch_policy(dim, 32 // hkv, max(q_lens), latency_bound=batch_size == 1)
        middle = policy.choose_splits(batch_size * hkv, keys, 132, chosen.block_n, chosen.programs_per_sm,
                                      chosen.min_chunk, chosen.whole_wave)
        assert (launch.edge == Edge.OWN_SPLIT) == own_edge
        assert (launch.splits, launch.chunk) == (middle[0] + own_edge, middle[1])
        assert (middle[0] > 1) == own_edge or batch_size > 1


def test_a_64_row_verify_at_page_size_1_pipelines_three_stages(kit_path) -> None:
    """The one launch choice that depends on the page size: a table read per key needs the third stage there."""
    stages = {(q_len, page): policy.launch_policy(64, 8, q_len, page_size=page).num_stages
              for q_len in (1, 8) for page in (1, 16)}
    assert stages == {(1, 1): 2, (1, 16): 2, (8, 1): 3, (8, 16): 2}
    assert policy.launch_policy(128, 4, 8, page_size=1).num_stages == policy.NUM_STAGES
    batch = random_paged_batch([8, 3], [300, 40], num_q_heads=64, num_kv_heads=8, head_dim=64,
                               dtype=torch.float16, generator=torch.Generator().manual_seed(3))
    assert kit_path.plan_batch(batch, 128).launch.num_stages == 3  # page size 1: SGLang's token-level layout


def test_the_constexpr_list_is_the_kernels(kit_path) -> None:
    """``kernel_constexprs`` (what a plan launches with and kernel_resources compiles) sets every compile-time
    argument of the kernel and nothing else; the edge's place and who merges are one argument each."""
    chosen = policy.launch_policy(128, 4, 8)
    split = KernelLaunch(3, 64, Merge.LAST_SPLIT, True, 5, 0, Edge.IN_WALK, True)
    constants = policy.kernel_constexprs(chosen, split, group=4, head_dim=128, page_size=16, sinks=True)
    assert set(constants) == {p.name for p in kit_path.kernel._swa_attend_kernel.params if p.is_constexpr}
    assert (constants["EDGE"], constants["MERGE"], constants["EDGE_KEYS"]) == (3, 2, policy.MAX_QUERIES)
    assert constants["MERGE_SPLITS"] == 4  # the fused merge unrolls a power of two
    one = policy.kernel_constexprs(chosen, split._replace(splits=1, merge=Merge.NONE), group=4, head_dim=128,
                                   page_size=16, sinks=True)
    assert one["MERGE_SPLITS"] == 1 and one["MERGE"] == 0
    kernel = kit_path.kernel  # the kernel's names for the choices it branches on hold the policy's values
    assert [kernel.EDGE_BEFORE.value, kernel.EDGE_PREFETCH.value, kernel.EDGE_IN_WALK.value,
            kernel.EDGE_OWN_SPLIT.value] == [Edge.BEFORE, Edge.PREFETCH, Edge.IN_WALK, Edge.OWN_SPLIT]
    assert [kernel.MERGE_NONE.value, kernel.MERGE_LAST_SPLIT.value] == [Merge.NONE, Merge.LAST_SPLIT]


def test_backend_declares_itself_and_is_unavailable_on_plain_cpu(kit_path) -> None:
    backend = get_path("kit_triton_swa")
    assert backend.tier == "kit-triton" and backend.modes == frozenset({"decode", "verify"}) and backend.honours_window
    assert backend.implementation == f"{kit_path.__name__}:run_batch"
    if not torch.cuda.is_available() and not interpreter_active():
        ok, reason = backend.available()
        assert not ok and "TRITON_INTERPRET" in reason
        with pytest.raises(PathUnavailableError, match="cannot run here"):
            run_path("kit_triton_swa", _batch(), 4)


def test_both_kernels_are_launched_asking_for_fp_fusion(kit_path, monkeypatch) -> None:
    """The attend kernel and the merge kernel are launched with ``enable_fp_fusion`` given (Triton 3.10 turns its
    default off; ``tests/test_kernel_resources.py`` shows what it changes in the walk's loop)."""
    launches = {}

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.__setitem__(self.name, kwargs)

    monkeypatch.setattr(kit_path.kernel, "_swa_attend_kernel", Recorder("attend"))
    monkeypatch.setattr(kit_path.kernel, "_merge_splits_kernel", Recorder("merge"))
    batch = random_paged_batch([1, 1], [300, 200], num_q_heads=4, num_kv_heads=2, head_dim=16, page_size=16,
                               dtype=torch.float16, generator=torch.Generator().manual_seed(0))
    kit_path.plan_batch(batch, 64, splits=2, fused_merge=0).run(batch.q)
    assert set(launches) == {"attend", "merge"}
    assert all(kwargs.get("enable_fp_fusion") is policy.FP_FUSION is True for kwargs in launches.values())


if __name__ == "__main__":
    _worker(sys.argv[1])
