"""Instructions a KV tile costs in the attention kernels' sm90 code, without a GPU.

python benchmarks/sass_tile_loop.py [--kernel persistent|unified] [--tile N] [--warps N]
                                    [--stages N]
                                    [--json PATH]

Compiles the Qwen3-0.6B decode config (bf16 cache, 16 q rows, 32-token tiles over 16-token
blocks, 2 warps) for sm90 with the knobs of this process's environment (STRIXLM_ATTN_*:
set them on the command line), assembles it with the ptxas that ships with triton and
disassembles it with its cuobjdump. Per tile loop (the persistent kernel's dealt loop; the
unified kernel's unmasked and masked loops) it prints the instructions on the common path
(the loop body less the branches it skips on most tiles: 10 or more instructions jumped
over, such as an item's start and end), its barriers and its busiest opcodes (the
persistent kernel's loop 1 walks the dynamically handed-out items), and the
kernel's registers, spills and shared memory. Session 40 found the workload follows this
count (docs/benchmarks.md): a CPU-side check of a loop change before it costs device time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from strixlm.kernels import attn_tiles  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels import paged_decode as pdk  # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
# Forward branches over at least this many instructions leave the common path.
SKIP_MIN = 10
SHAPE = dict(NUM_Q_HEADS=16, G=2, HEAD_DIM=128, DIM_P=128, BLOCK_SIZE=16, TILE=32)
# What the launchers pass for a contiguous bf16 cache at this shape.
PER_BLOCK = attn_tiles.ALIGNED_TILES and attn_tiles.BLOCK_PTRS


def _signature(kernel, consts: dict) -> tuple[dict, dict]:
    ptrs = {n: "*i32" for n in kernel.arg_names if n.endswith("_ptr")}
    ptrs.update({n: "*bf16" for n in ("out_ptr", "q_ptr", "k_cache_ptr", "v_cache_ptr",
                                      "k_ptr", "v_ptr", "k_new_ptr", "v_new_ptr")})  # fmt: skip
    ptrs.update({n: "*fp32" for n in ("segm_acc_ptr", "segm_max_ptr", "segm_sum_ptr")})
    floats = {"qk_scale", "out_scale", "qk_eps", "k_scale", "v_scale", "new_qk_scale",
              "new_v_inv"}  # fmt: skip
    sig = {}
    for n in kernel.arg_names:
        if n in consts:
            sig[n] = "constexpr"
        else:
            sig[n] = ptrs.get(n, "fp32" if n in floats else "i32")
    aligned = [n for n in sig if n.endswith("_ptr") or n.startswith("stride_")]
    names = list(kernel.arg_names)
    return sig, {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}


def compile_ptx(kind: str, stages: int, warps: int = 2) -> tuple[str, int]:
    """(PTX, shared bytes) of the kernel at the decode config, this process's knobs."""
    if kind == "persistent":
        kernel = pdk._paged_decode_persistent_kernel
        consts = dict(SHAPE, BLOCK_M=16, MAX_ITEMS=8, NUM_SEGS=1, IEEE=False, K_ROWS=False,
                      HAS_ORDER=True, FP8_PAIRS=False, FUSE_QK=False, BLOCK_G=2, HALF=64,
                      FP8=False, TIMING=False, DYNAMIC=True, PDL=True,
                      AHEAD=pdk.BLOCKS_AHEAD, LEAN=pdk.LEAN_LOOP,
                      PER_BLOCK=PER_BLOCK, ITEM_ROWS=pdk.ITEM_ROWS,
                      CAUSAL=pdk.CAUSAL_SCORES)  # fmt: skip
    else:
        kernel = pa._paged_attn_kernel
        consts = dict(SHAPE, BLOCK_M=16, BLOCK_Q=8, NUM_SEGS=1, SPLIT=False, IEEE=False,
                      K_ROWS=False, SEQ_GRID=True, HAS_ORDER=True, FP8_PAIRS=False, PDL=True,
                      EARLY=True, AHEAD=pa.UNIFIED_AHEAD, FRESH=False,
                      SKIP_DECODES=False, PER_BLOCK=PER_BLOCK)  # fmt: skip
    consts = {k: v for k, v in consts.items() if k in kernel.arg_names}
    sig, attrs = _signature(kernel, consts)
    k = triton.compile(ASTSource(kernel, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=warps, num_stages=stages))  # fmt: skip
    return k.asm["ptx"], k.metadata.shared


def assemble(ptx: str) -> tuple[str, str]:
    """(ptxas -v report, SASS text) of ptx for sm90a."""
    with tempfile.TemporaryDirectory() as d:
        src, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        Path(src).write_text(ptx)
        r = subprocess.run([str(BIN / "ptxas"), "-arch=sm_90a", "-O3", "-v", src, "-o", cubin],
                           capture_output=True, text=True, check=True)  # fmt: skip
        sass = subprocess.run([str(BIN / "cuobjdump"), "-sass", cubin],
                              capture_output=True, text=True, check=True)  # fmt: skip
    return r.stdout + r.stderr, sass.stdout


def tile_loops(sass: str) -> list[dict]:
    """Each loop (a backward branch), in program order: its size, common path, barriers."""
    ins = [(int(m.group(1), 16), m.group(2))
           for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*?)\s*;", sass)]  # fmt: skip
    at = {a: i for i, (a, _) in enumerate(ins)}
    target = [re.search(r"\bBRA (0x[0-9a-f]+)", t) if "BRA.DIV" not in t else None
              for _, t in ins]  # fmt: skip
    loops = []
    for i, m in enumerate(target):
        if m and int(m.group(1), 16) < ins[i][0]:
            lo, hi = at[int(m.group(1), 16)], i
            skip: set[int] = set()
            for j in range(lo, hi + 1):
                mj = target[j]
                dest = int(mj.group(1), 16) if mj else -1
                if ins[j][0] < dest <= ins[hi][0] and at[dest] - j - 1 >= SKIP_MIN:
                    skip.update(range(j + 1, at[dest]))
            body = [ins[j][1] for j in range(lo, hi + 1) if j not in skip]
            ops = Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in body)
            loops.append(dict(size=hi - lo + 1, common=len(body), barriers=ops["BAR"],
                              local=ops["LDL"] + ops["STL"],  # spill traffic in the loop
                              top=dict(ops.most_common(12))))  # fmt: skip
    return loops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=["persistent", "unified"], default="persistent")
    ap.add_argument("--tile", type=int, default=SHAPE["TILE"], help="KV tokens a tile")
    ap.add_argument("--warps", type=int, default=2, help="warps a program")
    ap.add_argument("--stages", type=int, default=None,
                    help="pipeline stages (default: the engine's for the config)")  # fmt: skip
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    stages = args.stages or 3
    SHAPE["TILE"] = args.tile
    ptx, shared = compile_ptx(args.kernel, stages, args.warps)
    report, sass = assemble(ptx)
    regs = re.search(r"Used (\d+) registers", report)
    spill = re.search(r"(\d+) bytes spill stores", report)
    loops = tile_loops(sass)
    # The first two loops are the tile loops: the persistent kernel's dealt loop and its
    # dynamic items' loop; the unified kernel's unmasked and masked loops.
    n_tile = 2
    knobs = {k: v for k, v in sorted(os.environ.items()) if k.startswith("STRIXLM_ATTN_")}
    out = dict(kernel=args.kernel, tile=args.tile, warps=args.warps, stages=stages, knobs=knobs,
               registers=int(regs.group(1)) if regs else None,
               spill_bytes=int(spill.group(1)) if spill else None, shared_bytes=shared,
               tile_loops=loops[:n_tile])  # fmt: skip
    print(f"{args.kernel}, tile {args.tile}, {args.warps} warps, {stages} stages, "
          f"knobs {knobs or 'default'}:"
          f" {out['registers']} registers, {out['spill_bytes']} bytes spilled, "
          f"{shared} bytes shared")  # fmt: skip
    for i, lp in enumerate(out["tile_loops"]):
        print(f"  tile loop {i}: {lp['common']} instructions on the common path "
              f"({lp['common'] * args.warps / args.tile:.1f} warp-instructions a token; "
              f"of {lp['size']}), "
              f"{lp['barriers']} barriers, {lp['local']} local loads / stores; "
              f"{lp['top']}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
