"""benchmarks/kernel_resources.py refuses a bad ``--set`` before it compiles anything, naming the way out; it compiles
the kernel a plan launches, tensor-core instructions and the walk loop's SASS counted; a config that does not compile
is reported by ptxas's own reason."""

from __future__ import annotations

import importlib.util
import json

import pytest
from benchmark_scripts import load_script

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")


@pytest.fixture(scope="module")
def kernel_resources():
    return load_script("kernel_resources")


@pytest.mark.parametrize(("item", "message"), [
    ("edge_prefetch", "give NAME=INT, e.g. edge_prefetch=1"),
    ("edge_prefetch=yes", "give NAME=INT"),
    ("edge_prefetc=1", "unknown launch override(s) ['edge_prefetc']; known: ["),
    ("whole_wave=2", "launch override whole_wave=2: give a bool or an int in 0..1"),
    ("block_n=24", "block_n=24: a key tile needs a power of two >= 16"),
])
def test_a_bad_override_is_refused_by_name(kernel_resources, capsys, item, message) -> None:
    with pytest.raises(SystemExit) as stopped:
        kernel_resources.main(["--set", item])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_every_compile_time_argument_of_the_kernel_is_passed(kernel_resources) -> None:
    """The resources are those of the kernel a plan launches: each of its constexprs set, none left to run time."""
    from swa_kit.attention.kit import kernel, policy
    from swa_kit.attention.kit.policy import Edge, Merge

    for dim, group, q_len, page, split in ((128, 4, 1, 16, False), (64, 8, 8, 1, True), (256, 2, 8, 16, True)):
        chosen = policy.launch_policy(dim, group, q_len, page_size=page, latency_bound=split)
        constants = kernel_resources.kernel_constants(chosen, dim, group, q_len, page, split)
        assert set(constants) == {p.name for p in kernel._swa_attend_kernel.params if p.is_constexpr}
        # a latency-bound verify's edge program, its split merged by the merge kernel
        assert (constants["EDGE"] == Edge.OWN_SPLIT) == (split and q_len > 1)
        assert constants["MERGE"] == (Merge.KERNEL if split else Merge.NONE)
        assert constants["INT32_OFFSETS"] == (q_len > 1)  # as a plan gives them, to buffers that fit
        assert constants["CLAMPED_WALK"] == (q_len > 1)
    verify = policy.launch_policy(128, 4, 8)  # the edge tile walked as a plan walks it: with two buffers, or asked for
    assert kernel_resources.kernel_constants(verify, 128, 4, 8, 16, False, deep=True)["EDGE"] == Edge.IN_WALK
    assert kernel_resources.kernel_constants(verify, 128, 4, 8, 16, False)["EDGE"] == Edge.BEFORE
    assert kernel_resources.kernel_constants(verify, 128, 4, 8, 16, False,
                                             overridden={"edge_in_walk"})["EDGE"] == Edge.IN_WALK


def test_the_tile_compiled_is_the_policys(kernel_resources) -> None:
    """The policy's tile compiles to tensor-core dots; half the keys per tile, half the shared memory at most."""
    ours = kernel_resources.compile_facts(128, 4, 1, 16, False)
    assert ours["wgmma"] + ours["mma_sync"] > 0  # the tile's two dots run on the tensor cores, one way or the other
    halved = kernel_resources.compile_facts(128, 4, 1, 16, False, block_n=ours["block_n"] // 2)
    assert halved["block_n"] == ours["block_n"] // 2 and halved["shared_bytes"] < ours["shared_bytes"]


def test_a_config_that_does_not_compile_is_reported_by_its_reason(kernel_resources) -> None:
    refused = RuntimeError("Internal Triton PTX codegen error\n`ptxas` stderr:\nptxas fatal   : (C7602) Insufficient "
                           "registers (128) to compile instruction\nptxas fatal   : Ptx assembly aborted due to errors")
    assert kernel_resources.compile_error(refused) == "(C7602) Insufficient registers (128) to compile instruction"
    assert kernel_resources.compile_error(ValueError("rows=24: no\nmore")) == "ValueError: rows=24: no"
    assert kernel_resources.compile_error(KeyError()) == "KeyError: "


def test_the_walk_loop_is_counted_from_a_backward_branch_to_its_target(kernel_resources) -> None:
    """The longest loop of a SASS listing, counted by hand: a forward branch is no loop, and of two loops the longer
    one is reported."""
    sass = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                       /* 0x00000a0000017a02 */
        /*0010*/               @P0 BRA 0x40 ;                                   /* 0x0000000000280947 */
        /*0020*/                   IMAD R2, R3, R4, RZ ;                        /* 0x0000000403027224 */
        /*0030*/               @P1 BRA 0x20 ;                                   /* 0x0000000000f81947 */
        /*0040*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;        /* 0x0000000c0804723c */
        /*0050*/                   LDGSTS.E.BYPASS.128 [R5], desc[UR4][R6.64] ; /* 0x0000000006057fae */
        /*0060*/                   FFMA R7, R7, R8, -R9 ;                       /* 0x0000000807077223 */
        /*0070*/               @P2 BRA 0x40 ;                                   /* 0x0000000000f02947 */
        /*0080*/                   EXIT ;                                       /* 0x000000000000794d */
    """
    assert kernel_resources.longest_loop_instructions(sass) == 4  # 0x40..0x70; the 0x20..0x30 loop has 2
    assert kernel_resources.longest_loop_instructions(sass.replace("@P2 BRA 0x40", "@P2 BRA 0x80")) == 2
    assert kernel_resources.longest_loop_instructions("") == 0


def test_a_verify_walks_more_instructions_per_tile_than_decode(kernel_resources) -> None:
    """Compiled for sm_90: the verify's taller query tile puts more instructions in the walk's loop than decode's."""
    decode = kernel_resources.compile_facts(128, 4, 1, 16, False)["walk_loop_sass"]
    verify = kernel_resources.compile_facts(128, 4, 8, 16, False)["walk_loop_sass"]
    assert 0 < decode < verify


def test_a_verify_whose_accumulator_outgrows_the_cap_runs_uncapped_and_compiles(kernel_resources) -> None:
    """GQA 8 with 8 drafts at head_dim 256: 64 query rows, whose accumulator alone takes 128 registers a thread.
    Under the verify's cap of 128 ptxas refuses it (on an H200 the kit's verify failed so); the policy lifts the cap."""
    facts = kernel_resources.compile_facts(256, 8, 8, 16, False)
    assert (facts["rows"], facts["max_registers"], facts["spill_stack_bytes"]) == (64, 0, 0)
    assert facts["registers"] > 128
    with pytest.raises(Exception, match="Insufficient registers"):  # noqa: B017 - Triton's compile error type
        kernel_resources.compile_facts(256, 8, 8, 16, False, max_registers=128)


def test_the_sweep_takes_every_shape_of_the_support_space_once(kernel_resources) -> None:
    launches = kernel_resources.sweep_launches()
    labels = [launch[0] for launch in launches]
    assert len(labels) == len(set(labels)) == 3 * 5 * 2 * 2 * 4  # dims x groups x (decode, verify) x pages x launches
    assert {(dim, group, q_len) for _, dim, group, q_len, *_ in launches} == {
        (dim, group, q_len) for dim in (64, 128, 256) for group in (1, 2, 4, 8, 16) for q_len in (1, 8)}
    assert ("verify d256 GQA 8 p16", 256, 8, 8, 16, False, False, False, {}) in launches  # the one the cap broke
    assert all(launch[8] == kernel_resources._deep() for launch in launches if launch[6])


def test_the_sweep_prints_only_what_spills_or_does_not_compile(kernel_resources, monkeypatch, capsys, tmp_path) -> None:
    """compile_facts stood in for (no compiles): one launch refused, one spilling, the rest clean."""
    def fake(dim, group, q_len, page, split, deep, latency_bound, **overrides):
        if (dim, group, q_len, page, split, deep, latency_bound) == (256, 16, 8, 16, True, False, True):
            raise RuntimeError("ptxas fatal   : (C7602) Insufficient registers (128)")
        return {"rows": 16, "block_n": 32, "num_stages": 3, "max_registers": 0, "registers": 100, "shared_bytes": 4096,
                "spill_stack_bytes": 8 if (dim, group, q_len, page) == (64, 1, 1, 1) and not split and not deep
                else 0, "programs_per_sm_by_registers": 4, "wgmma": 0, "mma_sync": 4, "walk_loop_sass": 300}

    monkeypatch.setattr(kernel_resources, "compile_facts", fake)
    assert kernel_resources.main(["--sweep", "--json", str(tmp_path / "sweep.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("decode d64 GQA 1 p1 ") and "8 B spilled" in lines[0]
    assert lines[1].startswith("verify d256 GQA 16 p16 latency-bound split") and "Insufficient registers" in lines[1]
    assert lines[2:] == ["240 launch configs compiled for sm_90: 1 refused, 1 spilling"]
    assert json.loads((tmp_path / "sweep.json").read_text())["sweep"] is True


def test_the_kernel_fuses_its_multiply_adds_whatever_tritons_default(kernel_resources, monkeypatch) -> None:
    """The kit asks for floating-point fusion by name (``FP_FUSION``): with Triton's default turned off, as Triton 3.10
    will turn it, the walk compiles to the same loop; asked not to fuse, to a different one (its score multiply-adds
    split in two)."""
    import triton

    from swa_kit.attention.kit import policy

    fused = kernel_resources.compile_facts(128, 4, 1, 16, False)["walk_loop_sass"]
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    assert not triton.knobs.language.default_fp_fusion
    assert kernel_resources.compile_facts(128, 4, 1, 16, False)["walk_loop_sass"] == fused
    monkeypatch.setattr(policy, "FP_FUSION", False)
    assert kernel_resources.compile_facts(128, 4, 1, 16, False)["walk_loop_sass"] != fused
