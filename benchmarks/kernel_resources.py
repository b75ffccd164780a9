"""Registers, spills and shared memory of the kit's kernel per launch config, compiled for an H100/H200 on any host.

    python benchmarks/kernel_resources.py [--json OUT] [--set NAME=VALUE] [--variant PATH] [--sweep]

No GPU is needed: Triton compiles the kernel for compute capability 9.0 with its own bundled
``ptxas``, and ``cuobjdump`` (bundled too) reads the resources back. The arguments are specialised
as the GPU launch specialises them (pointers and strides divisible by 16), so the pipelining and
vector widths match what runs on the device. Registers decide how many programs share an SM
(65,536 per SM, four warps of 32 threads each per program): that is what v5's register cap is
about (docs/kernel-notes.md). Each row also counts the tensor-core instructions in the PTX: Hopper's
asynchronous warp-group MMA (``wgmma``) or the older per-warp ``mma.sync``, whichever Triton chose
for the tile, and the SASS instructions in the walk's loop body: what each warp issues per K/V tile, which is
what a launch waits on where a batch leaves each scheduler one or two warps (docs/kernel-notes.md, v11's fourth
pass). ``--variant`` compiles a copy of kit_triton.py (a candidate kernel) instead.
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
from types import ModuleType

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.kernel_variants import load_variant  # noqa: E402
from swa_kit.attention.kit import kernel as kit_triton  # noqa: E402
from swa_kit.errors import PathUnavailableError  # noqa: E402

POINTERS = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "out_ptr": "*bf16", "sink_ptr": "*fp32",
            "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32"}
REGISTERS_PER_SM = 65536
SPLIT_COUNT = 4  # a split launch as compiled here: v10 splits B 8's windows 2-4 ways (the fused merge unrolls 2 or 4)

# (label, head_dim, GQA group, longest query run, page size, split): the grid's head shapes, decode and verify.
SHAPES = [(f"{kind} {name} p{page}{' split' if split else ''}", dim, group, q_len, page, split)
          for name, dim, group in (("32/8/128", 128, 4), ("32/16/256", 256, 2), ("64/8/64", 64, 8))
          for kind, q_len in (("decode", 1), ("verify", kit_triton.MAX_QUERIES))
          for page in (1, 16) for split in (False, True)]
# --sweep: beyond the grid, the models' head dims with GQA groups of 1-16 (powers of two), decode and a full verify.
SWEEP_DIMS, SWEEP_GROUPS = (64, 128, 256), (1, 2, 4, 8, 16)


def kernel_constants(config: dict[str, int], dim: int, group: int, q_len: int, page: int, split: bool,
                     deep: bool = False, overridden: Collection[str] = (), kt: ModuleType = kit_triton) -> dict:
    """The kernel's compile-time arguments for one launch config, from the list ``DecodePlan.run`` launches with
    (a split launch with its edge tile in a program of its own where the config asks for one; sinks: GPT-OSS;
    the edge tile walked as the plan decides it, for a launch with two K/V buffers or not, ``deep``; 32-bit K/V
    offsets where the config asks for them, as a plan gives them to buffers that fit). ``kt``: the kernel module
    (kit_triton or a variant of it)."""
    return kt.kernel_constexprs(group=group, head_dim=dim, rows=config["rows"], page_size=page,
                                block_n=config["block_n"], splits=SPLIT_COUNT if split else 1, verify=q_len > 1,
                                edge_prefetch=bool(config["edge_prefetch"]),
                                edge_split=split and bool(config["edge_split"]),
                                fused_merge=split and bool(config["fused_merge"]), sinks=dim == 64,
                                edge_in_walk=q_len > 1 and kt.walks_edge(config, deep, overridden),
                                # named only where on: a variant from before a switch has no such argument
                                **{name: True for name in ("int32_offsets", "clamped_walk") if config.get(name)})


def compile_facts(dim: int, group: int, q_len: int, page: int, split: bool, deep: bool = False,
                  kt: ModuleType = kit_triton, latency_bound: bool = False, **overrides: int) -> dict:
    """Compile one launch config of ``kt``'s kernel for sm_90 and read its shared memory, registers, spill stack,
    tensor-core instructions and the SASS instructions of its walk's loop (``deep``: a launch with two K/V buffers,
    whose overrides say so; ``latency_bound``: the policy's config for a batch too small to fill the GPU)."""
    config = kt.with_overrides(kt.launch_config(dim, group, q_len, page_size=page, latency_bound=latency_bound),
                               overrides)
    fn = kt._swa_attend_kernel
    constants = kernel_constants(config, dim, group, q_len, page, split, deep, overrides, kt)
    signature = {name: "constexpr" if name in constants else POINTERS.get(name, "*i32" if name.endswith("_ptr")
                 else "fp32" if name == "sm_scale_log2" else "i32") for name in fn.arg_names}
    divisible = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
                 if signature[name].startswith("*") or name.startswith("stride") or name in ("chunk", "window")}
    options = {"num_warps": config["num_warps"], "num_stages": config["num_stages"],
               "enable_fp_fusion": kt.FP_FUSION}
    if config["max_registers"]:
        options["maxnreg"] = config["max_registers"]
    kernel = triton.compile(ASTSource(fn, signature, constants, divisible), target=GPUTarget("cuda", 90, 32),
                            options=options)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        usage = subprocess.run([str(tool), "--dump-resource-usage", cubin.name], capture_output=True, text=True,
                               check=True).stdout
        sass = subprocess.run([str(tool), "-sass", cubin.name], capture_output=True, text=True, check=True).stdout
    registers, stack = (int(x) for x in re.search(r"REG:(\d+) STACK:(\d+)", usage).groups())
    warps = config["num_warps"]
    by_registers = REGISTERS_PER_SM // (-(-registers // 8) * 8 * 32 * warps)  # allocated in 8-register steps
    ptx = kernel.asm["ptx"]
    return {"rows": config["rows"], "block_n": config["block_n"], "num_stages": config["num_stages"],
            "edge_in_walk": constants["EDGE_IN_WALK"], "int32_offsets": constants.get("INT32_OFFSETS", False),
            "clamped_walk": constants.get("CLAMPED_WALK", False),
            "max_registers": config["max_registers"], "registers": registers, "spill_stack_bytes": stack,
            "shared_bytes": kernel.metadata.shared, "programs_per_sm_by_registers": by_registers,
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


def _deep(kt: ModuleType) -> dict[str, int]:
    return {"num_stages": kt.DEEP_STAGES, "max_registers": 0}  # two K/V buffers, as a small grid launches them


def grid_launches(kt: ModuleType) -> list[Launch]:
    """The grid's head shapes (:data:`SHAPES`): each one-buffer launch, a verify's uncapped too, and two buffers."""
    launches = []
    for label, dim, group, q_len, page, split in SHAPES:
        variants = [("", {}), *([(" uncapped", {"max_registers": 0})] if q_len > 1 else []), (" deep", _deep(kt))]
        launches += [(label + suffix, dim, group, q_len, page, split, suffix == " deep", False, extra)
                     for suffix, extra in variants]
    return launches


def sweep_launches(kt: ModuleType) -> list[Launch]:
    """Every launch the policy makes over :data:`SWEEP_DIMS` x :data:`SWEEP_GROUPS`, decode and an 8-draft verify, page
    sizes 1 and 16: one buffer, split or not; two buffers; a latency-bound batch's split (with its edge program)."""
    return [(f"{'verify' if q_len > 1 else 'decode'} d{dim} GQA {group} p{page}{suffix}", dim, group, q_len, page,
             split, deep, latency_bound, _deep(kt) if deep else {})
            for dim in SWEEP_DIMS for group in SWEEP_GROUPS for q_len in (1, kt.MAX_QUERIES) for page in (1, 16)
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
    parser.add_argument("--variant", type=Path, metavar="PATH",
                        help="compile this copy of swa_kit/attention/kit/kernel.py (a candidate kernel) instead")
    args = parser.parse_args(argv)
    try:
        kt = load_variant(args.variant) if args.variant else kit_triton
    except (FileNotFoundError, ValueError) as error:
        parser.error(f"--variant: {error}")
    chosen = {}
    for item in args.set:
        name, _, value = item.partition("=")
        if not value.lstrip("-").isdigit():
            parser.error(f"--set {item!r}: give NAME=INT, e.g. edge_prefetch=1")
        chosen[name] = int(value)
    try:  # unknown names and bad values are refused as plan_decode refuses them
        kt.with_overrides(kt.launch_config(128, 4, 1), chosen)
    except (ValueError, PathUnavailableError) as error:
        parser.error(f"--set: {error}")
    rows = []
    for label, dim, group, q_len, page, split, deep, latency_bound, extra in (sweep_launches(kt) if args.sweep
                                                                              else grid_launches(kt)):
        try:
            facts = compile_facts(dim, group, q_len, page, split, deep, kt, latency_bound, **{**chosen, **extra})
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
                                         **({"variant": args.variant.name} if args.variant else {}),
                                         **({"sweep": True} if args.sweep else {}),
                                         **({"overrides": chosen} if chosen else {}), "rows": rows},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
