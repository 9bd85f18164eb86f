"""Would the add + RMSNorm between two decode GEMMs cost less folded into them? An experiment
for issue 3 (decode steps at 129-256 requests).

A layer runs o_proj -> add + RMSNorm -> gate_up and down -> add + RMSNorm -> the next qkv. The
norm kernel moves ~2 MB at batch 256 yet costs a launch, a kernel boundary and ~2.3 us of
latency, twice per layer. It cannot go into the producer GEMM's epilogue (a tile does not
see its whole row) but can be split across the two GEMMs without any grid-wide sync:
  producer (linear_add_stats): x @ w.T, rounded as the GEMM's store would, plus the residual
      (rounded, and written back in place, as the norm kernel does), and per row the sum of
      squares of its tile's columns -> parts [N / BLOCK_N, M] fp32;
  consumer (norm_linear): per row, the parts summed in a fixed order give the rms; the K loop
      normalizes each A tile as it loads it (the norm kernel's roundings: x * rstd to the
      activation dtype, then times the weight, rounded) before the dot.
The normalized activations are never written. The variance is summed in another order than
the norm kernel's one reduction, so a normalized element can differ by one bf16 step.

Both launch with PDL, as the engine's Triton kernels do. Timed: 28 x [producer -> consumer]
per CUDA graph, per-layer weights, against the engine's kernels for the same chain (its
o_proj / down dispatch, fused_add_rmsnorm, its gate_up / qkv dispatch). Every config is first
checked against the torch chain. Not yet run on a GPU (written after session 12's budget).

python benchmarks/gpu/bench_norm_prologue.py [--json PATH] [--rows M ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from strixlm.kernels.pdl import pdl_enabled, pdl_prologue  # noqa: E402

HIDDEN = 1024
EPS = 1e-6
LAYERS = 28
# (name, producer K, consumer N): o_proj (K 2048) -> gate_up (6144); down (3072) -> qkv (4096)
CHAINS = [("o_proj->gate_up", 2048, 6144), ("down->qkv", 3072, 4096)]


@triton.jit
def _linear_add_stats_kernel(
    x_ptr, w_ptr, res_ptr, sq_ptr, M, N, K, stride_xm, stride_wn, stride_rm,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl_prologue(PDL)
    pid_n = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(x_ptr + rows[:, None] * stride_xm + (k0 + ks)[None, :], mask=row_ok[:, None])
        b = tl.load(w_ptr + cols[None, :].to(tl.int64) * stride_wn + (k0 + ks)[:, None])
        acc = tl.dot(a, b, acc)
    ty = res_ptr.dtype.element_ty
    r_ptrs = res_ptr + rows[:, None].to(tl.int64) * stride_rm + cols[None, :]
    res = tl.load(r_ptrs, mask=row_ok[:, None], other=0.0)
    # As F.linear's output rounds, then `x + residual` rounded, as the norm kernel does.
    r = (acc.to(ty).to(tl.float32) + res.to(tl.float32)).to(ty)
    tl.store(r_ptrs, r, mask=row_ok[:, None])
    rf = r.to(tl.float32)
    tl.store(sq_ptr + pid_n * M + rows, tl.sum(rf * rf, axis=1), mask=row_ok)


@triton.jit
def _norm_linear_kernel(
    r_ptr, sq_ptr, nw_ptr, w_ptr, out_ptr, M, N, K, eps, stride_rm, stride_wn, stride_om,
    N_PARTS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl_prologue(PDL)
    pid_n = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    parts = tl.arange(0, N_PARTS)
    sq = tl.load(sq_ptr + parts[:, None] * M + rows[None, :], mask=row_ok[None, :], other=0.0)
    rstd = tl.rsqrt(tl.sum(sq, axis=0) / K + eps)
    ty = r_ptr.dtype.element_ty
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(r_ptr + rows[:, None] * stride_rm + (k0 + ks)[None, :], mask=row_ok[:, None])
        nw = tl.load(nw_ptr + k0 + ks).to(tl.float32)
        xn = (a.to(tl.float32) * rstd[:, None]).to(ty)
        a_n = (xn.to(tl.float32) * nw[None, :]).to(ty)
        b = tl.load(w_ptr + cols[None, :].to(tl.int64) * stride_wn + (k0 + ks)[:, None])
        acc = tl.dot(a_n, b, acc)
    out = out_ptr + rows[:, None].to(tl.int64) * stride_om + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])


def linear_add_stats(x, w, residual, cfg):
    """residual += x @ w.T (rounded as the engine rounds it, in place); returns the per-tile
    sums of squares [N / BLOCK_N, M]. N and K must be multiples of the tile."""
    bm, bn, bk, warps, stages = cfg
    m, k = x.shape
    n = w.shape[0]
    assert n % bn == 0 and k % bk == 0 and residual.shape == (m, n)
    sq = torch.empty((n // bn, m), dtype=torch.float32, device=x.device)
    _linear_add_stats_kernel[(n // bn, triton.cdiv(m, bm))](
        x, w, residual, sq, m, n, k, x.stride(0), w.stride(0), residual.stride(0),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, PDL=pdl_enabled(x), num_warps=warps,
        num_stages=stages, launch_pdl=pdl_enabled(x),
    )  # fmt: skip
    return sq


def norm_linear(r, sq, norm_w, w, cfg, eps=EPS):
    """rmsnorm(r) * norm_w @ w.T, the rms from the producer's sums of squares."""
    bm, bn, bk, warps, stages = cfg
    m, k = r.shape
    n = w.shape[0]
    assert n % bn == 0 and k % bk == 0 and sq.shape[1] == m
    out = torch.empty((m, n), dtype=r.dtype, device=r.device)
    n_parts = sq.shape[0]
    assert n_parts & (n_parts - 1) == 0, "the parts are reduced as one power-of-two block"
    _norm_linear_kernel[(n // bn, triton.cdiv(m, bm))](
        r, sq, norm_w, w, out, m, n, k, float(eps), r.stride(0), w.stride(0), out.stride(0),
        N_PARTS=n_parts, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, PDL=pdl_enabled(r),
        num_warps=warps, num_stages=stages, launch_pdl=pdl_enabled(r),
    )  # fmt: skip
    return out


def chain_ref(x, w_prod, residual, norm_w, w_cons, eps=EPS):
    """The torch chain: (linear, add, RMSNorm as strixlm's reference rounds it, linear);
    returns (consumer output, new residual)."""
    h = F.linear(x.float(), w_prod.float()).to(x.dtype)
    r = (h.float() + residual.float()).to(x.dtype)
    rf = r.float()
    xn = (rf * torch.rsqrt(rf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    a = (xn.float() * norm_w.float()).to(x.dtype)
    return F.linear(a.float(), w_cons.float()).to(x.dtype), r


# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages). Producers: the engine's o_proj tile and its
# neighbours (N / BLOCK_N sums of squares per row, a power of two); consumers: the tiles that
# won the dense and TMA sweeps at these rows.
PRODUCERS = [(64, 32, 128, 4, 3), (32, 32, 128, 4, 3), (64, 64, 128, 4, 3), (128, 64, 64, 4, 3)]
CONSUMERS = [
    (64, 64, 128, 4, 3),
    (64, 128, 64, 4, 3),
    (128, 64, 64, 4, 3),
    (64, 128, 128, 4, 3),
    (128, 128, 64, 8, 3),
]


def layer_linears(weights: list[torch.Tensor]) -> list:
    """The engine's Linear per layer (its own dispatch: our tile GEMMs where their tables say,
    else cuBLAS), holding the given weights."""
    from strixlm.layers.linear import Linear

    out = []
    for w in weights:
        lin = Linear(w.shape[1], w.shape[0], bias=False, device="cuda", dtype=w.dtype)
        with torch.no_grad():
            lin.weight.copy_(w)
        out.append(lin)
    return out


def time_chain(name, m, prods, conss, nws) -> dict:
    """Per-layer time of the engine's chain and of the best fused pair at m rows."""
    from graph_timing import graph_time_us

    from strixlm.kernels.rmsnorm import fused_add_rmsnorm

    k_prod, n_cons = prods[0].shape[1], conss[0].shape[0]
    lins_p, lins_c = layer_linears(prods), layer_linears(conss)
    x = torch.randn(m, k_prod, device="cuda").to(torch.bfloat16)
    res0 = torch.randn(m, HIDDEN, device="cuda").to(torch.bfloat16)
    residual = res0.clone()

    def engine() -> None:
        for lp, lc, nw in zip(lins_p, lins_c, nws, strict=True):
            xn, _ = fused_add_rmsnorm(lp(x), residual, nw, EPS)
            lc(xn)

    base = graph_time_us(engine, 10) / LAYERS
    ref, _ = chain_ref(x, prods[0], res0, nws[0], conss[0])
    best: tuple[float, tuple | None, tuple | None] = (float("inf"), None, None)
    for pc in PRODUCERS:
        parts = HIDDEN // pc[1]
        if HIDDEN % pc[1] or k_prod % pc[2] or parts & (parts - 1):
            continue
        for cc in CONSUMERS:
            if n_cons % cc[1] or HIDDEN % cc[2]:
                continue
            r = res0.clone()
            try:
                got = norm_linear(r, linear_add_stats(x, prods[0], r, pc), nws[0], conss[0], cc)
            except Exception as e:  # noqa: BLE001 - a config that cannot build
                print(f"  {pc} / {cc}: {type(e).__name__} {str(e)[:100]}")
                continue
            err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            if err > 2e-2:
                print(f"  {name} M={m} {pc} / {cc}: WRONG (rel err {err:.3g})")
                continue

            def fused(pc=pc, cc=cc) -> None:
                for wp, wc, nw in zip(prods, conss, nws, strict=True):
                    norm_linear(residual, linear_add_stats(x, wp, residual, pc), nw, wc, cc)

            t = graph_time_us(fused, 10) / LAYERS
            best = min(best, (t, pc, cc), key=lambda b: b[0])
    print(f"{name:16s} M={m:4d} engine (GEMM, add + RMSNorm, GEMM) {base:6.2f} us  "
          f"fused pair {best[0]:6.2f} us {best[1]} / {best[2]}  "
          f"gain {base - best[0]:+5.2f}")  # fmt: skip
    return dict(chain=name, m=m, engine_us=base, fused_us=best[0], producer_cfg=best[1],
                consumer_cfg=best[2])  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--rows", type=int, nargs="+", default=[136, 160, 192, 224, 256])
    args = ap.parse_args()
    results = []
    for name, k_prod, n_cons in CHAINS:
        torch.manual_seed(0)
        bf = torch.bfloat16
        prods = [(0.02 * torch.randn(HIDDEN, k_prod, device="cuda")).to(bf) for _ in range(LAYERS)]
        conss = [(0.02 * torch.randn(n_cons, HIDDEN, device="cuda")).to(bf) for _ in range(LAYERS)]
        nws = [(1 + 0.1 * torch.randn(HIDDEN, device="cuda")).to(bf) for _ in range(LAYERS)]
        for m in args.rows:
            results.append(time_chain(name, m, prods, conss, nws))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
