"""Probe: may a cuBLAS GEMM inside a CUDA graph start early (programmatic dependent launch)?

Our Triton kernels take part in PDL (strixlm/kernels/pdl.py), but cuBLAS launches do not,
so every Triton -> cuBLAS boundary of a decode step waits for the full drain of the Triton
kernel plus a launch. A captured graph's edge can be turned programmatic after capture
(driver API: cuGraphRemoveDependencies_v2 / cuGraphAddDependencies_v2 with
CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC); that is safe only if the consumer kernel waits
(griddepcontrol.wait, SASS ACQBULK) before reading its inputs. cuBLAS's nvjet kernels are
not in libcublasLt's fatbin as named functions, so their code cannot be inspected offline:
this script tests their behaviour instead.

A producer kernel lets its dependents launch at once, spins for --spin-us, then writes X.
The consumer reads X. With a programmatic edge between them:
  - a Triton copy WITHOUT a wait must read the stale X (this shows the edge took effect);
  - a Triton copy WITH the wait must read the new X;
  - F.linear (cuBLAS), at every decode / mixed-step GEMM shape of Qwen3-0.6B: a stale X
    means that kernel does not wait, and cuBLAS boundaries must stay plain edges. (A fresh
    X alone proves nothing: the consumer may simply not have found room on the SMs early.)

Result (H200, 2026-12-01, docs/results/logs/2026-12-01h-h200-probe.log): the split-K nvjet
kernels and the small-M qkv / o_proj / gate_up kernels read the stale X at M 1-128: cuBLAS
does not wait, and the opt-in edge conversion (branch graph-pdl-cublas) was dropped.
Then, if cuBLAS waits: replay time of a chain of 28 x (Triton add -> cuBLAS GEMM), plain
edges vs programmatic ones.

python benchmarks/gpu/probe_cublas_pdl.py [--spin-us 200]
"""

from __future__ import annotations

import argparse
import ctypes
import sys

import torch
import triton
import triton.language as tl
from graph_timing import replay_time_us
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

# ---- driver API: kernel nodes and edges of a captured graph ---------------------------------

CU_GRAPH_NODE_TYPE_KERNEL = 0
CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC = 1
CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC = 1


class EdgeData(ctypes.Structure):  # CUgraphEdgeData
    _fields_ = [
        ("from_port", ctypes.c_ubyte),
        ("to_port", ctypes.c_ubyte),
        ("type", ctypes.c_ubyte),
        ("reserved", ctypes.c_ubyte * 5),
    ]


class _Driver:
    """libcuda, opened on first use (the module also imports where there is no driver)."""

    lib: ctypes.CDLL | None = None

    def __getattr__(self, name: str):
        if _Driver.lib is None:
            _Driver.lib = ctypes.CDLL("libcuda.so.1")
        return getattr(_Driver.lib, name)


_cuda = _Driver()


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed: CUresult {rc}")


def graph_nodes(graph: int) -> list[int]:
    n = ctypes.c_size_t(0)
    _check(_cuda.cuGraphGetNodes(ctypes.c_void_p(graph), None, ctypes.byref(n)), "cuGraphGetNodes")
    arr = (ctypes.c_void_p * n.value)()
    _check(_cuda.cuGraphGetNodes(ctypes.c_void_p(graph), arr, ctypes.byref(n)), "cuGraphGetNodes")
    return [a for a in arr]


def kernel_name(node: int) -> str | None:
    t = ctypes.c_int(-1)
    _check(_cuda.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(t)), "cuGraphNodeGetType")
    if t.value != CU_GRAPH_NODE_TYPE_KERNEL:
        return None
    params = (ctypes.c_void_p * 16)()  # CUDA_KERNEL_NODE_PARAMS_v2: func comes first
    _check(_cuda.cuGraphKernelNodeGetParams_v2(ctypes.c_void_p(node), params), "GetParams")
    name = ctypes.c_char_p()
    _check(_cuda.cuFuncGetName(ctypes.byref(name), ctypes.c_void_p(params[0])), "cuFuncGetName")
    return name.value.decode()


def graph_edges(graph: int) -> list[tuple[int, int, EdgeData]]:
    n = ctypes.c_size_t(0)
    g = ctypes.c_void_p(graph)
    _check(_cuda.cuGraphGetEdges_v2(g, None, None, None, ctypes.byref(n)), "cuGraphGetEdges_v2")
    src, dst = (ctypes.c_void_p * n.value)(), (ctypes.c_void_p * n.value)()
    data = (EdgeData * n.value)()
    _check(_cuda.cuGraphGetEdges_v2(g, src, dst, data, ctypes.byref(n)), "cuGraphGetEdges_v2")
    return [(src[i], dst[i], data[i]) for i in range(n.value)]


def make_programmatic(graph: int, src: int, dst: int) -> None:
    g = ctypes.c_void_p(graph)
    a, b = (ctypes.c_void_p * 1)(src), (ctypes.c_void_p * 1)(dst)
    plain = (EdgeData * 1)()
    _check(_cuda.cuGraphRemoveDependencies_v2(g, a, b, plain, ctypes.c_size_t(1)), "remove")
    e = (EdgeData * 1)()
    e[0].from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
    e[0].type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
    _check(_cuda.cuGraphAddDependencies_v2(g, a, b, e, ctypes.c_size_t(1)), "add")


def programmatic_into(graph: int, dst_pred) -> int:
    """Turn every kernel -> kernel edge whose destination's name satisfies dst_pred into a
    programmatic edge; returns how many."""
    names = {n: kernel_name(n) for n in graph_nodes(graph)}
    count = 0
    for src, dst, data in graph_edges(graph):
        if names.get(src) and names.get(dst) and data.type == 0 and dst_pred(names[dst]):
            make_programmatic(graph, src, dst)
            count += 1
    return count


# ---- kernels ----------------------------------------------------------------------------------


@triton.jit
def _now(dummy):
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer; // $1", "=l,r", [dummy], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit
def _producer(x_ptr, n, spin_ns, BLOCK: tl.constexpr):
    gdc_launch_dependents()  # dependents may start now; their wait still covers our writes
    t0 = _now(n)
    t = t0
    while t - t0 < spin_ns:
        t = _now(n)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.full([BLOCK], 1.0, tl.bfloat16), mask=offs < n)


@triton.jit
def _copy(x_ptr, y_ptr, n, WAIT: tl.constexpr, BLOCK: tl.constexpr):
    if WAIT:
        gdc_wait()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    gdc_wait()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    gdc_launch_dependents()
    tl.store(x_ptr + offs, x + 1.0, mask=offs < n)


# ---- the probe --------------------------------------------------------------------------------


def run_case(kind: str, spin_ns: int, m: int = 64, k: int = 256, nn: int = 128) -> bool:
    """Whether the consumer read the new X after a replay with the programmatic edge.
    The cuBLAS consumer is F.linear(x, w) with w [nn, k] of ones, as the model calls it, so
    a fresh read gives k in every output element and a stale one 0."""
    x = torch.zeros(m, k, dtype=torch.bfloat16, device="cuda")
    w = torch.ones(nn, k, dtype=torch.bfloat16, device="cuda")
    y = torch.zeros(m, k if kind.startswith("triton") else nn, dtype=torch.bfloat16, device="cuda")
    block = 1024
    grid = (triton.cdiv(x.numel(), block),)

    def body() -> None:
        x.zero_()
        _producer[grid](x, x.numel(), spin_ns, BLOCK=block)
        if kind == "cublas":
            torch.nn.functional.linear(x, w, out=y)
        else:
            _copy[grid](x, y, x.numel(), WAIT=kind == "triton-wait", BLOCK=block, launch_pdl=True)

    body()  # compile outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        body()
    graph = g.raw_cuda_graph()
    names = [kernel_name(n) for n in graph_nodes(graph)]
    if kind == "cublas":
        changed = programmatic_into(graph, lambda name: "_producer" not in name)
    else:
        changed = sum(1 for _, _, d in graph_edges(graph) if d.type == 1)
    g.instantiate()
    y.zero_()
    g.replay()
    torch.cuda.synchronize()
    want = float(k) if kind == "cublas" else 1.0
    fresh = bool((y.float() == want).all().item())
    consumer = [n for n in names if n and "_producer" not in n and "fill" not in n]
    seen = "new" if fresh else "STALE"
    print(f"{kind:13s} M={m:5d} K={k:5d} N={nn:6d} consumer {consumer}; programmatic edges "
          f"{changed}; output mean {y.float().mean().item():.1f}: {seen}")  # fmt: skip
    return fresh


# The decode and mixed-step GEMMs of the Qwen3-0.6B shape: (K, N) of qkv, o_proj, gate_up,
# down and lm_head, at the row counts the graphs are captured for.
MODEL_KN = [(1024, 4096), (2048, 1024), (1024, 6144), (3072, 1024), (1024, 151936)]
ROWS = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096, 8192]


def time_chain(programmatic: bool, layers: int = 28, iters: int = 50) -> float:
    x = torch.randn(256, 1024, dtype=torch.bfloat16, device="cuda")
    ws = [torch.randn(1024, 1024, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    block = 1024
    grid = (triton.cdiv(x.numel(), block),)

    def body() -> None:
        h = x
        for i in range(layers):
            _add_one[grid](h, h.numel(), BLOCK=block, launch_pdl=True)
            h = torch.mm(h, ws[i % 4])

    body()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        body()
    if programmatic:
        programmatic_into(g.raw_cuda_graph(), lambda name: "_add_one" not in name)
    g.instantiate()
    return replay_time_us(g, iters)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spin-us", type=float, default=200.0)
    args = ap.parse_args()
    if not hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph"):
        sys.exit("this torch has no CUDAGraph(keep_graph=True).raw_cuda_graph()")
    spin = int(args.spin_us * 1000)
    stale = run_case("triton-nowait", spin)
    fresh = run_case("triton-wait", spin)
    if not (not stale and fresh):
        print("INCONCLUSIVE: the Triton controls did not show early start / waiting")
        return
    bad = []
    for k, nn in MODEL_KN:
        for m in ROWS:
            if k * nn * m > 8192 * 1024 * 6144 or (nn > 100_000 and m > 512):
                continue  # the lm_head runs on sampled rows only
            if not run_case("cublas", spin, m, k, nn):
                bad.append((m, k, nn))
    if bad:
        print(f"cuBLAS kernels read the stale input at {bad}: keep plain edges")
        return
    print("cuBLAS kernel waited for its producer: programmatic edges into it are safe")
    for p in (False, True, False, True):
        print(f"chain of 28 x (Triton add -> cuBLAS GEMM 256x1024x1024), "
              f"{'programmatic' if p else 'plain'} edges: {time_chain(p):.1f} us")  # fmt: skip


if __name__ == "__main__":
    main()
