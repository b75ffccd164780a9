"""Registers, spills and shared memory of the kit's kernel per launch config, compiled for an H100/H200 on any host.

    python benchmarks/kernel_resources.py [--json OUT] [--set NAME=VALUE] [--sweep]

No GPU is needed: Triton compiles the kernel for compute capability 9.0 with its own bundled
``ptxas``, and ``cuobjdump`` (bundled too) reads the resources back. The arguments are specialised
as the GPU launch specialises them (pointers and strides divisible by 16), so the pipelining and
vector widths match what runs on the device. Registers decide how many programs share an SM
(65,536 per SM, four warps of 32 threads each per program): that is what v5's register cap is
about (docs/kernel.md). Each row also counts the tensor-core instructions in the PTX: Hopper's
asynchronous warp-group MMA (``wgmma``) or the older per-warp ``mma.sync``, whichever Triton chose
for the tile, and the SASS instructions in the walk's loop body: what each warp issues per K/V tile, which is
what a launch waits on where a batch leaves each scheduler one or two warps (docs/kernel.md, v11).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Collection
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from swa_kit.attention.kit import kernel, policy  # noqa: E402
from swa_kit.attention.kit.policy import Edge, KernelLaunch, LaunchPolicy, Merge  # noqa: E402

POINTERS = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "out_ptr": "*bf16", "sink_ptr": "*fp32",
            "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32"}
REGISTERS_PER_SM = 65536
SPLIT_COUNT = 4  # a split launch as compiled here: v10 splits B 8's windows 2-4 ways (the fused merge unrolls 2 or 4)

# (label, head_dim, GQA group, longest query run, page size, split): the grid's head shapes, decode and verify.
SHAPES = [(f"{kind} {name} p{page}{' split' if split else ''}", dim, group, q_len, page, split)
          for name, dim, group in (("32/8/128", 128, 4), ("32/16/256", 256, 2), ("64/8/64", 64, 8))
          for kind, q_len in (("decode", 1), ("verify", policy.MAX_QUERIES))
          for page in (1, 16) for split in (False, True)]
# --sweep: beyond the grid, the models' head dims with GQA groups of 1-16 (powers of two), decode and a full verify.
SWEEP_DIMS, SWEEP_GROUPS = (64, 128, 256), (1, 2, 4, 8, 16)


def kernel_constants(chosen: LaunchPolicy, dim: int, group: int, q_len: int, page: int, split: bool,
                     deep: bool = False, overridden: Collection[str] = ()) -> dict:
    """The kernel's compile-time arguments for one launch policy, from the list a plan launches with (a split launch
    of :data:`SPLIT_COUNT` splits, with its edge tile in a program of its own where the policy asks for one; sinks:
    GPT-OSS; the edge tile placed as a plan places it, for a launch with two K/V buffers or not, ``deep``; 32-bit K/V
    offsets where the policy asks for them, as a plan gives them to buffers that fit)."""
    splits = SPLIT_COUNT if split else 1
    merge = Merge.NONE if not split else Merge.LAST_SPLIT if chosen.fused_merge else Merge.KERNEL
    launch = KernelLaunch(splits, chosen.block_n, merge, deep, chosen.num_stages, chosen.max_registers,
                          policy.place_edge(chosen, q_len > 1, splits, deep, overridden), chosen.int32_offsets)
    return policy.kernel_constexprs(chosen, launch, group=group, head_dim=dim, page_size=page, sinks=dim == 64)


def compile_facts(dim: int, group: int, q_len: int, page: int, split: bool, deep: bool = False,
                  latency_bound: bool = False, **overrides: int) -> dict:
    """Compile one launch of the kit's kernel for sm_90 and read its shared memory, registers, spill stack,
    tensor-core instructions and the SASS instructions of its walk's loop (``deep``: a launch with two K/V buffers,
    whose overrides say so; ``latency_bound``: the policy for a batch too small to fill the GPU)."""
    chosen = policy.with_overrides(policy.launch_policy(dim, group, q_len, page_size=page,
                                                        latency_bound=latency_bound), overrides)
    fn = kernel._swa_attend_kernel
    constants = kernel_constants(chosen, dim, group, q_len, page, split, deep, overrides)
    signature = {name: "constexpr" if name in constants else POINTERS.get(name, "*i32" if name.endswith("_ptr")
                 else "fp32" if name == "sm_scale_log2" else "i32") for name in fn.arg_names}
    divisible = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
                 if signature[name].startswith("*") or name.startswith("stride") or name in ("chunk", "window")}
    options = {"num_warps": chosen.num_warps, "num_stages": chosen.num_stages, "enable_fp_fusion": policy.FP_FUSION}
    if chosen.max_registers:
        options["maxnreg"] = chosen.max_registers
    compiled = triton.compile(ASTSource(fn, signature, constants, divisible), target=GPUTarget("cuda", 90, 32),
                              options=options)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        usage = subprocess.run([str(tool), "--dump-resource-usage", cubin.name], capture_output=True, text=True,
                               check=True).stdout
        sass = subprocess.run([str(tool), "-sass", cubin.name], capture_output=True, text=True, check=True).stdout
    registers, stack = (int(x) for x in re.search(r"REG:(\d+) STACK:(\d+)", usage).groups())
    warps = chosen.num_warps
    by_registers = REGISTERS_PER_SM // (-(-registers // 8) * 8 * 32 * warps)  # allocated in 8-register steps
    ptx = compiled.asm["ptx"]
    return {"rows": chosen.rows, "block_n": chosen.block_n, "num_stages": chosen.num_stages,
            "edge": Edge(constants["EDGE"]).name.lower(), "int32_offsets": constants["INT32_OFFSETS"],
            "clamped_walk": constants["CLAMPED_WALK"],
            "max_registers": chosen.max_registers, "registers": registers, "spill_stack_bytes": stack,
            "shared_bytes": compiled.metadata.shared, "programs_per_sm_by_registers": by_registers,
            "wgmma": len(re.findall(r"\bwgmma\.mma_async\b", ptx)), "mma_sync": len(re.findall(r"\bmma\.sync\b", ptx)),
            "walk_loop_sass": longest_loop_instructions(sass)}


SASS_LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", re.M)


def longest_loop_instructions(sass: str) -> int:
    """SASS instructions in the longest loop body of a kernel (the walk's: one pass over a K/V tile, what a warp
    issues per tile), from a backward branch's target to the branch itself; 0 without a loop."""
    lines = [(int(address, 16), text) for address, text in SASS_LINE.findall(sass)]
    bodies = []
    for address, text in lines:
        branch = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if branch and int(branch.group(1), 16) < address:
            bodies.append(sum(int(branch.group(1), 16) <= a <= address for a, _ in lines))
    return max(bodies, default=0)


def compile_error(error: Exception) -> str:
    """The line that says why a config did not compile: ptxas's own where it refused, else the error's first."""
    text = str(error)
    refused = re.search(r"ptxas fatal\s*:\s*(.+)", text)
    return refused.group(1).strip() if refused else f"{type(error).__name__}: {(text.strip().splitlines() or [''])[0]}"


# label, head_dim, GQA group, longest query run, page size, split, two K/V buffers, latency-bound, launch overrides
Launch = tuple[str, int, int, int, int, bool, bool, bool, dict]


def _deep() -> dict[str, int]:
    return {"num_stages": policy.DEEP_STAGES, "max_registers": 0}  # two K/V buffers, as a small grid launches them


def grid_launches() -> list[Launch]:
    """The grid's head shapes (:data:`SHAPES`): each one-buffer launch, a verify's uncapped too, and two buffers."""
    launches = []
    for label, dim, group, q_len, page, split in SHAPES:
        variants = [("", {}), *([(" uncapped", {"max_registers": 0})] if q_len > 1 else []), (" deep", _deep())]
        launches += [(label + suffix, dim, group, q_len, page, split, suffix == " deep", False, extra)
                     for suffix, extra in variants]
    return launches


def sweep_launches() -> list[Launch]:
    """Every launch the policy makes over :data:`SWEEP_DIMS` x :data:`SWEEP_GROUPS`, decode and an 8-draft verify, page
    sizes 1 and 16: one buffer, split or not; two buffers; a latency-bound batch's split (with its edge program)."""
    return [(f"{'verify' if q_len > 1 else 'decode'} d{dim} GQA {group} p{page}{suffix}", dim, group, q_len, page,
             split, deep, latency_bound, _deep() if deep else {})
            for dim in SWEEP_DIMS for group in SWEEP_GROUPS for q_len in (1, policy.MAX_QUERIES) for page in (1, 16)
            for suffix, split, deep, latency_bound in (("", False, False, False), (" split", True, False, False),
                                                       (" deep", False, True, False),
                                                       (" latency-bound split", True, False, True))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a launch override for every config (an A/B candidate), e.g. edge_prefetch=1")
    parser.add_argument("--sweep", action="store_true",
                        help="compile every launch the policy makes for head dims 64-256 and GQA groups 1-16 (powers "
                             "of two) instead of the grid's; print only what spills or does not compile")
    args = parser.parse_args(argv)
    chosen = {}
    for item in args.set:
        name, _, value = item.partition("=")
        if not value.lstrip("-").isdigit():
            parser.error(f"--set {item!r}: give NAME=INT, e.g. edge_prefetch=1")
        chosen[name] = int(value)
    try:  # unknown names and bad values are refused as plan_decode refuses them
        policy.with_overrides(policy.launch_policy(128, 4, 1), chosen)
    except ValueError as error:
        parser.error(f"--set: {error}")
    rows = []
    for label, dim, group, q_len, page, split, deep, latency_bound, extra in (sweep_launches() if args.sweep
                                                                              else grid_launches()):
        try:
            facts = compile_facts(dim, group, q_len, page, split, deep, latency_bound, **{**chosen, **extra})
        except Exception as error:  # a config that does not compile is a fact too (ptxas out of registers)
            rows.append({"config": label, "error": compile_error(error)})
            print(f"{label:<34} does not compile: {rows[-1]['error']}")
            continue
        rows.append({"config": label, **facts})
        if not args.sweep or facts["spill_stack_bytes"]:
            print(f"{rows[-1]['config']:<34} rows {facts['rows']:>2} tile {facts['block_n']:>3} stages "
                  f"{facts['num_stages']} cap {facts['max_registers'] or '-':>3}: {facts['registers']:>3} registers, "
                  f"{facts['spill_stack_bytes']:>3} B spilled, {facts['shared_bytes'] // 1024:>2} KiB shared, "
                  f"{facts['programs_per_sm_by_registers']} programs/SM by registers; "
                  f"{facts['wgmma']} wgmma, {facts['mma_sync']} mma.sync; walk loop {facts['walk_loop_sass']} SASS")
    failed = sum("error" in row for row in rows)
    print(f"{len(rows)} launch configs compiled for sm_90: {failed} refused, "
          f"{sum(row.get('spill_stack_bytes', 0) > 0 for row in rows)} spilling")
    if args.json:
        args.json.write_text(json.dumps({"triton": triton.__version__, "target": "cuda sm_90",
                                         **({"sweep": True} if args.sweep else {}),
                                         **({"overrides": chosen} if chosen else {}), "rows": rows},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
