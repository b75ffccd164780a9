"""Masks against brute-force definitions written here, independently of swa_kit.window."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from swa_kit.cli import main
from swa_kit.errors import MaskError, WindowConventionError
from swa_kit.masks import (
    MODES,
    BlockView,
    binary_tree_parents,
    block_view,
    chunked_mask,
    decode_mask,
    extend_mask,
    forward_mask,
    mask_for,
    prefill_mask,
    verify_chain_mask,
    verify_tree_mask,
)
from swa_kit.window import Window

# ---- the oracle: plain loops over positions, the window read as "the `keys` most recent positions" ----

def _depths(parents):
    out = []
    for i in range(len(parents)):
        d, node = 0, i
        while parents[node] != -1:
            node, d = parents[node], d + 1
        out.append(d)
    return out


def _is_ancestor_or_self(parents, j, i):
    node = i
    while node != -1:
        if node == j:
            return True
        node = parents[node]
    return False


def brute(mode, q_len, kv_len, keys, parents=None, chunk=None):
    prefix = kv_len - q_len
    if mode == "tree":
        depth = _depths(parents)
        q_pos = [prefix + d for d in depth]
        k_pos = list(range(prefix)) + q_pos
    else:
        q_pos = list(range(prefix, kv_len))
        k_pos = list(range(kv_len))
    out = []
    for i, qp in enumerate(q_pos):
        recent = set(range(qp + 1)) if keys is None else set(range(max(0, qp - keys + 1), qp + 1))
        row = []
        for c, kp in enumerate(k_pos):
            if mode == "chunked":
                ok = kp <= qp and kp // chunk == qp // chunk
            else:
                ok = kp in recent
            if mode == "tree" and c >= prefix:
                ok = ok and _is_ancestor_or_self(parents, c - prefix, i)
            row.append(ok)
        out.append(row)
    return torch.tensor(out, dtype=torch.bool).reshape(q_len, kv_len)


def _random_parents(draw, n):
    return [-1] + [draw(st.integers(-1, i - 1)) for i in range(1, n)]


@st.composite
def cases(draw, modes=MODES):
    mode = draw(st.sampled_from(modes))
    keys = draw(st.none() | st.integers(1, 40))
    chunk = None
    parents = None
    if mode == "prefill":
        q_len = kv_len = draw(st.integers(1, 40))
    elif mode == "decode":
        q_len, kv_len = 1, draw(st.integers(1, 60))
    else:
        q_len = draw(st.integers(1, 24))
        kv_len = q_len + draw(st.integers(0, 40))
    if mode == "tree":
        parents = _random_parents(draw, q_len)
    if mode == "chunked":
        keys, chunk = None, draw(st.integers(1, 20))
    return dict(mode=mode, q_len=q_len, kv_len=kv_len, keys=keys, parents=parents, chunk=chunk)


def _dense(c):
    return mask_for(c["mode"], c["q_len"], c["kv_len"], c["keys"], parents=c["parents"], chunk=c["chunk"])


@given(cases())
def test_every_mode_matches_brute_force(c):
    got = _dense(c)
    assert got.dtype == torch.bool and got.shape == (c["q_len"], c["kv_len"])
    assert torch.equal(got, brute(c["mode"], c["q_len"], c["kv_len"], c["keys"], c["parents"], c["chunk"]))


def test_window_one_is_the_diagonal():
    assert torch.equal(prefill_mask(9, 1), torch.eye(9, dtype=torch.bool))
    got = extend_mask(3, 10, 1)
    assert got.sum().item() == 3 and got[:, 7:].diagonal().all()


@pytest.mark.parametrize("keys", [12, 13, 50])
def test_window_at_least_kv_len_is_plain_causal(keys):
    assert torch.equal(prefill_mask(12, keys), torch.ones(12, 12, dtype=torch.bool).tril())
    assert torch.equal(extend_mask(5, 12, keys), mask_for("extend", 5, 12, None))


def test_no_window_is_causal_aligned_to_end():
    got = extend_mask(3, 7, None)
    want = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(got, want)


def test_q_len_longer_than_window_keeps_keys_per_row():
    got = prefill_mask(20, 4)
    assert got.sum(dim=1).tolist() == [1, 2, 3] + [4] * 17
    assert torch.equal(got, brute("prefill", 20, 20, 4))


def test_empty_prefix_extend_equals_prefill():
    assert torch.equal(extend_mask(11, 11, 3), prefill_mask(11, 3))
    assert torch.equal(verify_chain_mask(0, 5, 2), prefill_mask(5, 2))


def test_decode_is_the_last_prefill_row():
    for keys in (None, 1, 5, 100):
        assert torch.equal(decode_mask(17, keys)[0], prefill_mask(17, keys)[-1])


def test_verify_chain_is_extend():
    assert torch.equal(verify_chain_mask(10, 4, 6), extend_mask(4, 14, 6))


def test_tree_of_depth_one():
    # root (the last verified token) with three children: each child sees the prefix window and the root.
    got = verify_tree_mask(6, [-1, 0, 0, 0], 3)
    assert got.shape == (4, 10)
    assert got[0].tolist() == [0, 0, 0, 0, 1, 1, 1, 0, 0, 0]  # root at position 6: keys 4, 5, itself
    for child in (1, 2, 3):  # position 7: keys 5, 6 (root), itself; never a sibling
        want = [0] * 10
        want[5] = want[6] = want[6 + child] = 1
        assert got[child].tolist() == want
    assert torch.equal(got, brute("tree", 4, 10, 3, [-1, 0, 0, 0]))


def test_single_node_tree_is_decode():
    assert torch.equal(verify_tree_mask(9, [-1], 4), decode_mask(10, 4))


def test_tree_positions_and_default_binary_tree():
    spec = forward_mask("tree", 7, 12, 4)
    assert spec.parents == binary_tree_parents(7) == (-1, 0, 0, 1, 1, 2, 2)
    assert spec.q_positions().tolist() == [5, 6, 6, 7, 7, 7, 7]
    assert spec.k_positions().tolist() == [0, 1, 2, 3, 4, 5, 6, 6, 7, 7, 7, 7]
    assert torch.equal(spec.dense(), brute("tree", 7, 12, 4, list(spec.parents)))


def test_chunked_contrast():
    got = chunked_mask(8, 8, 4)
    want = torch.zeros(8, 8, dtype=torch.bool)
    want[:4, :4] = torch.ones(4, 4).tril().bool()
    want[4:, 4:] = torch.ones(4, 4).tril().bool()
    assert torch.equal(got, want)
    # the first query of a chunk sees only itself, however long the context
    assert chunked_mask(1, 9, 4).tolist() == [[False] * 8 + [True]]


def test_accepts_a_window_object():
    assert torch.equal(prefill_mask(6, Window(2)), prefill_mask(6, 2))


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: mask_for("extend", 5, 4, 2), "q_len 5 > kv_len 4"),
        (lambda: mask_for("prefill", 3, 5, 2), "'extend'"),
        (lambda: mask_for("decode", 2, 5, 2), "q_len 2"),
        (lambda: mask_for("extend", -1, 4, 2), "-1"),
        (lambda: mask_for("extend", 0, 4, 2), "q_len must be >= 1, got 0"),
        (lambda: mask_for("extend", 2, -3, 2), "-3"),
        (lambda: mask_for("extend", 2.0, 4, 2), "2.0"),
        (lambda: mask_for("extend", True, 4, 2), "True"),
        (lambda: mask_for("sideways", 2, 4, 2), "'sideways'"),
        (lambda: mask_for("tree", 3, 5, 2, parents=[-1, 0]), "2 parents but q_len is 3"),
        (lambda: mask_for("tree", 2, 5, 2, parents=[-1, 1]), "parents[1] = 1"),
        (lambda: mask_for("tree", 2, 5, 2, parents=[0, 0]), "parents[0] = 0"),
        (lambda: mask_for("tree", 2, 5, 2, parents=[-1, -2]), "parents[1] = -2"),
        (lambda: mask_for("tree", 1, 5, 2, parents=[]), "non-empty"),
        (lambda: mask_for("tree", 1, 5, 2, parents="0"), "non-empty"),
        (lambda: mask_for("extend", 2, 5, 2, parents=[-1, 0]), "only apply to mode 'tree'"),
        (lambda: mask_for("chunked", 2, 5, None), "chunk size"),
        (lambda: mask_for("chunked", 2, 5, None, chunk=0), "chunk must be >= 1, got 0"),
        (lambda: mask_for("chunked", 2, 5, 3, chunk=4), "pass window=None"),
        (lambda: mask_for("extend", 2, 5, 3, chunk=4), "only applies to mode 'chunked'"),
        (lambda: verify_chain_mask(-1, 2, 3), "prefix_len must be >= 0, got -1"),
        (lambda: block_view(forward_mask("prefill", 4, 4, 2), 0), "block must be >= 1, got 0"),
    ],
)
def test_bad_arguments_raise_mask_error_naming_the_value(call, needle):
    with pytest.raises(MaskError, match=None) as info:
        call()
    assert needle in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("window", [0, -2, 1.5, True])
def test_bad_window_raises_window_convention_error(window):
    with pytest.raises(WindowConventionError, match=repr(window).replace(".", r"\.")):
        prefill_mask(4, window)


# ---- block view ----

def _tiles(dense: np.ndarray, bq: int, bk: int) -> np.ndarray:
    q_len, kv_len = dense.shape
    nq, nk = -(-q_len // bq), -(-kv_len // bk)
    out = np.zeros((nq, nk), dtype=np.int64)
    for i in range(q_len):
        for j in range(kv_len):
            out[i // bq, j // bk] += int(dense[i, j])
    return out


@given(cases(), st.integers(1, 9), st.integers(1, 9))
def test_block_view_matches_dense(c, bq, bk):
    spec = forward_mask(c["mode"], c["q_len"], c["kv_len"], c["keys"], parents=c["parents"], chunk=c["chunk"])
    dense = brute(c["mode"], c["q_len"], c["kv_len"], c["keys"], c["parents"], c["chunk"]).numpy()
    view = spec.block_view((bq, bk))
    want = _tiles(dense, bq, bk)
    assert np.array_equal(view.counts, want)
    assert view.total_pairs == int(dense.sum())
    rows = np.minimum(bq, c["q_len"] - np.arange(want.shape[0]) * bq)[:, None]
    cols = np.minimum(bk, c["kv_len"] - np.arange(want.shape[1]) * bk)[None, :]
    assert np.array_equal(view.full, want == rows * cols)
    assert np.array_equal(view.partial, (want > 0) & (want < rows * cols))
    for qb in range(want.shape[0]):
        assert view.kv_blocks(qb).tolist() == np.flatnonzero(want[qb]).tolist()


def test_block_view_at_128k_without_the_dense_mask():
    view = forward_mask("prefill", 131072, 131072, 1024).block_view(128)
    assert isinstance(view, BlockView) and view.counts.shape == (1024, 1024)
    # closed form: query q attends min(q + 1, 1024) keys
    assert view.total_pairs == sum(range(1, 1025)) + (131072 - 1024) * 1024
    assert view.needed.sum(axis=1).max() == 9  # 1024 / 128 + the straddling block
    assert "9180 of 1048576 tiles needed" in view.summary()


# ---- FlexAttention export ----

flex = pytest.importorskip("torch.nn.attention.flex_attention")


@given(cases())
def test_mask_mod_over_index_grid_equals_dense(c):
    spec = forward_mask(c["mode"], c["q_len"], c["kv_len"], c["keys"], parents=c["parents"], chunk=c["chunk"])
    q_idx = torch.arange(spec.q_len)[:, None]
    kv_idx = torch.arange(spec.kv_len)[None, :]
    got = spec.mask_mod()(torch.tensor(0), torch.tensor(0), q_idx, kv_idx)
    assert torch.equal(got, spec.dense())


FLEX_CASES = [
    dict(mode="prefill", q_len=40, kv_len=40, window=7),
    dict(mode="extend", q_len=21, kv_len=70, window=9),
    dict(mode="decode", q_len=1, kv_len=50, window=None),
    dict(mode="tree", q_len=7, kv_len=30, window=5, parents=[-1, 0, 0, 1, 1, 2, 2]),
    dict(mode="chunked", q_len=30, kv_len=45, window=None, chunk=8),
]


@pytest.mark.parametrize("case", FLEX_CASES, ids=[c["mode"] for c in FLEX_CASES])
def test_block_mask_and_flex_attention_match_dense(case):
    spec = forward_mask(**case)
    block_mask = spec.block_mask(block=8)
    present = block_mask.to_dense()[0, 0].numpy().astype(bool)
    assert np.array_equal(present, spec.block_view(8).needed)
    torch.manual_seed(0)
    q = torch.randn(1, 2, spec.q_len, 16)
    k, v = torch.randn(2, 1, 2, spec.kv_len, 16).unbind(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "called without torch.compile": unfused is fine here
            got = flex.flex_attention(q, k, v, block_mask=block_mask)
    except Exception as error:  # pragma: no cover - depends on the torch build
        pytest.skip(f"flex_attention does not run on CPU in torch {torch.__version__}: {error}")
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=spec.dense())
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


# ---- swa-kit mask ----

def _json(capsys, argv):
    assert main(["mask", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("argv, mode, q_len, kv_len, keys, extra", [
    (["--mode", "prefill", "--kv-len", "9", "--window", "3"], "prefill", 9, 9, 3, {}),
    (["--mode", "extend", "--q-len", "4", "--kv-len", "11", "--window", "none"], "extend", 4, 11, None, {}),
    (["--mode", "decode", "--kv-len", "7", "--window", "2"], "decode", 1, 7, 2, {}),
    (["--mode", "verify", "--q-len", "3", "--kv-len", "8", "--window", "4"], "verify", 3, 8, 4, {}),
    (["--mode", "tree", "--q-len", "7", "--kv-len", "12", "--window", "4"], "tree", 7, 12, 4, {}),
    (["--mode", "tree", "--kv-len", "9", "--parents=-1,0,0,1", "--window", "3"], "tree", 4, 9, 3,
     {"parents": [-1, 0, 0, 1]}),
    (["--mode", "chunked", "--q-len", "5", "--kv-len", "13", "--chunk", "4"], "chunked", 5, 13, None, {"chunk": 4}),
    (["--mode", "prefill", "--kv-len", "8", "--window", "2", "--convention", "sglang"], "prefill", 8, 8, 3, {}),
    (["--mode", "prefill", "--kv-len", "8", "--window", "2,0", "--convention", "flash_attn"], "prefill", 8, 8, 3, {}),
    (["--mode", "prefill", "--kv-len", "8", "--window", "0", "--convention", "aiter_v1"], "prefill", 8, 8, None, {}),
])
def test_cli_json_is_the_dense_mask(capsys, argv, mode, q_len, kv_len, keys, extra):
    out = _json(capsys, argv)
    want = mask_for(mode, q_len, kv_len, keys, **extra)
    assert out["mask"] == want.int().tolist() and out["window_keys"] == keys
    assert set(v for row in out["mask"] for v in row) <= {0, 1}
    spec = forward_mask(mode, q_len, kv_len, keys, **extra)
    assert out["q_positions"] == spec.q_positions().tolist() and out["k_positions"] == spec.k_positions().tolist()


def test_cli_text_grid(capsys):
    assert main(["mask", "--mode", "extend", "--q-len", "3", "--kv-len", "6", "--window", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == forward_mask("extend", 3, 6, 2).describe()
    assert lines[1:] == ["q 3 ..##..", "q 4 ...##.", "q 5 ....##"]


@pytest.mark.parametrize("as_json", [False, True])
def test_cli_block_view_at_128k(capsys, as_json):
    argv = ["mask", "--mode", "prefill", "--kv-len", "131072", "--window", "1024", "--block", "128"]
    assert main(argv + (["--json"] if as_json else [])) == 0
    out = capsys.readouterr().out
    view = forward_mask("prefill", 131072, 131072, 1024).block_view(128)
    if as_json:
        rows = json.loads(out)["q_blocks"]
        assert len(rows) == 1024
        assert rows[100] == {"q_block": 100, "kv_blocks": view.kv_blocks(100).tolist(),
                             "pairs": int(view.keys_per_q_block[100])}
    else:
        assert view.summary() in out and "q block 100: kv blocks 92..100 (9 blocks" in out


@pytest.mark.parametrize("kv_len, picture", [(20, "mask"), (2048, "blocks")])
def test_cli_png(tmp_path, capsys, kv_len, picture):
    import matplotlib.image

    path = tmp_path / "mask.png"
    assert main(["mask", "--mode", "prefill", "--kv-len", str(kv_len), "--window", "5", "--png", str(path)]) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100


@pytest.mark.parametrize("argv, needle", [
    (["--mode", "prefill", "--kv-len", "100", "--window", "3", "--json"], "--block 128"),
    (["--mode", "prefill", "--kv-len", "9"], "give --window"),
    (["--mode", "extend", "--kv-len", "9", "--window", "3"], "needs --q-len"),
    (["--mode", "extend", "--q-len", "10", "--kv-len", "9", "--window", "3"], "q_len 10 > kv_len 9"),
    (["--mode", "extend", "--q-len", "-2", "--kv-len", "9", "--window", "3"], "-2"),
    (["--mode", "prefill", "--kv-len", "9", "--window", "0"], "invalid window value 0"),
    (["--mode", "prefill", "--kv-len", "9", "--window", "1.5"], "1.5"),
    (["--mode", "prefill", "--kv-len", "9", "--window", "3,1", "--convention", "flash_attn"], "right = 1"),
    (["--mode", "chunked", "--kv-len", "9", "--q-len", "2", "--chunk", "4", "--window", "3"], "window=None"),
    (["--mode", "chunked", "--kv-len", "9", "--q-len", "2"], "chunk size"),
    (["--mode", "tree", "--kv-len", "9", "--parents", "a,b", "--window", "3"], "'a,b'"),
    (["--mode", "tree", "--kv-len", "9", "--parents=-1,2", "--window", "3"], "parents[1] = 2"),
])
def test_cli_bad_input_exits_2_with_one_line(capsys, argv, needle):
    assert main(["mask", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and needle in captured.err and captured.err.count("\n") == 1


@pytest.mark.parametrize("argv", [["--mode", "sideways", "--kv-len", "4"], ["--mode", "decode", "--kv-len", "x"]])
def test_cli_argparse_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(["mask", *argv, "--window", "2"])
    assert info.value.code == 2 and capsys.readouterr().err.count("\n") == 1


# --- the mask as JSON and text (what `swa-kit mask` prints) ------------------------------------------------------

def test_to_json_and_to_text_of_a_tree_show_siblings_apart():
    rng = np.random.default_rng()
    prefix, keys = int(rng.integers(0, 6)), int(rng.integers(2, 6))
    mask = forward_mask("tree", 5, prefix + 5, keys, parents=[-1, 0, 0, 1, 2])
    data = mask.to_json()
    assert json.loads(json.dumps(data)) == data  # plain JSON values only
    assert data["parents"] == [-1, 0, 0, 1, 2] and data["window_keys"] == keys
    # siblings 1 and 2 share position prefix + 1; token 3 sees its parent 1 and root 0 (window allowing), never 2
    assert data["q_positions"] == [prefix, prefix + 1, prefix + 1, prefix + 2, prefix + 2]
    dense = np.array(data["mask"])
    assert dense[3, prefix + 2] == 0 and dense[3, prefix + 1] == 1 and dense[4, prefix + 1] == 0
    lines = mask.to_text().splitlines()
    assert lines[0] == mask.describe() and len(lines) == 6
    width = len(str(prefix + 2))
    for line, pos, row in zip(lines[1:], data["q_positions"], data["mask"]):
        assert line == f"q {pos:>{width}} " + "".join(".#"[v] for v in row)


def test_blocks_to_text_lists_gaps_and_runs():
    # four roots on a 6-token prefix, token 4 hangs off root 3: it reads prefix key 5 (block 2), root 3 (column 9,
    # block 4) and itself (column 10, block 5), never roots 0..2 (block 3): a gap
    mask = forward_mask("tree", 5, 11, 3, parents=[-1, -1, -1, -1, 3])
    view = mask.block_view(2)
    rows = mask.blocks_to_json(2)["q_blocks"]
    assert rows == view.q_blocks() and [r["q_block"] for r in rows] == [0, 1, 2]
    assert rows[2] == {"q_block": 2, "kv_blocks": [2, 4, 5], "pairs": 3}
    text = mask.blocks_to_text(2).splitlines()
    assert text[:2] == [mask.describe(), view.summary()] and len(text) == 5
    assert text[4] == "  q block 2: kv blocks 2,4,5 (3 blocks, 3 pairs)"
    kv = rows[0]["kv_blocks"]
    assert text[2] == f"  q block 0: kv blocks {kv[0]}..{kv[-1]} ({len(kv)} blocks, {rows[0]['pairs']} pairs)"
    assert kv == list(range(kv[0], kv[-1] + 1))
