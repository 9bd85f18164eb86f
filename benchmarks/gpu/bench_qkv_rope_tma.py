"""Does the qkv projection with the q/k norm + rotary + K/V write in its epilogue
(kernels/qkv_rope_tma.py) beat the decode step's two launches (the engine's qkv GEMM, then
qk_norm_rope's launch with the cache write)?

Timed as a step runs them: 28 x [PDL producer -> qkv path] in one CUDA graph, each layer with
its own [4096, 1024] weight (Qwen3-0.6B: 16 q heads, 8 kv heads, head_dim 128, bf16), minus
the producers alone, per layer. The producer reads the previous layer's q, so every layer
depends on the one before. Before timing, every config's q and cache are compared with the
two launches' (they differ only where the GEMMs' fp32 summation orders round differently).

python benchmarks/gpu/bench_qkv_rope_tma.py [--rows M ...] [--reps N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from graph_timing import graph_time_us  # noqa: E402
from sweep_tma_gemm import engine_gemm  # noqa: E402

from strixlm.kernels import qkv_rope_tma as fused  # noqa: E402
from strixlm.kernels.pdl import pdl_enabled, pdl_prologue  # noqa: E402
from strixlm.kernels.qk_norm_rope import qk_norm_rope_inplace  # noqa: E402
from strixlm.kernels.tma_linear import TmaConfig  # noqa: E402
from strixlm.layers.rotary import RotaryEmbedding  # noqa: E402

LAYERS, HQ, HK, D, HID = 28, 16, 8, 128, 1024
EPS, BLOCK_SIZE, MAX_POS = 1e-6, 16, 4096
ROWS = (64, 96, 128, 136, 160, 192, 224, 256)
CONFIGS = (
    TmaConfig(64, 64, 128, 4, 3),
    TmaConfig(64, 64, 128, 4, 4),
    TmaConfig(64, 64, 64, 4, 4),
    TmaConfig(128, 64, 64, 4, 3),
    TmaConfig(128, 64, 64, 8, 3),
    TmaConfig(32, 64, 128, 4, 4),
)


@triton.jit
def _producer(h_ptr, stride_h, x_ptr, K: tl.constexpr, PDL: tl.constexpr):
    # The RMSNorm's place in the chain: reads the previous layer's q row, writes x.
    pdl_prologue(PDL)
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, K)
    h = tl.load(h_ptr + row * stride_h + c).to(tl.float32)
    tl.store(x_ptr + row * K + c, (h * 0.5 + 0.1).to(x_ptr.dtype.element_ty))


class Step:
    """One decode step's inputs at m rows: weights, norms, rotary tables, a cache, slots."""

    def __init__(self, m: int) -> None:
        g = torch.Generator(device="cuda").manual_seed(m)
        dev, bf = "cuda", torch.bfloat16
        self.m = m
        self.ws = [
            (0.03 * torch.randn((HQ + 2 * HK) * D, HID, device=dev, generator=g)).to(bf)
            for _ in range(LAYERS)
        ]
        self.qw = (1.0 + 0.1 * torch.randn(D, device=dev, generator=g)).to(bf)
        self.kw = (1.0 + 0.1 * torch.randn(D, device=dev, generator=g)).to(bf)
        rot = RotaryEmbedding(D, MAX_POS, 1e6).to(dev)
        self.cos, self.sin = rot.cos, rot.sin
        self.pos = torch.randint(100, 2000, (m,), device=dev, generator=g)
        blocks = 4 * m
        self.slots = torch.randperm(blocks * BLOCK_SIZE, device=dev, generator=g)[:m]
        self.cache = torch.zeros(2, blocks, BLOCK_SIZE, HK, D, device=dev, dtype=bf)
        self.h0 = torch.randn(m, HQ * D, device=dev, dtype=bf)
        self.x = torch.empty(m, HID, device=dev, dtype=bf)
        self.gemm = engine_gemm(m, (HQ + 2 * HK) * D, HID)

    def two_launches(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        qkv = self.gemm(x, w)
        q, k, v = qkv.split([HQ * D, HK * D, HK * D], dim=-1)
        q = q.view(self.m, HQ, D)
        k, v = k.view(self.m, HK, D), v.view(self.m, HK, D)
        qk_norm_rope_inplace(
            self.pos, q, k, self.qw, self.kw, EPS, self.cos, self.sin, v=v,
            kv_cache=self.cache, slot_mapping=self.slots,
        )  # fmt: skip
        return q

    def fused(self, x: torch.Tensor, w: torch.Tensor, cfg: TmaConfig) -> torch.Tensor:
        return fused.qkv_rope_tma(
            x, w, HQ, HK, self.pos, self.qw, self.kw, EPS, self.cos, self.sin, self.cache,
            self.slots, cfg=cfg,
        )  # fmt: skip

    def chain_us(self, path, reps: int) -> float:
        """Per-layer time of LAYERS x [producer -> path] (path None: the producers alone)."""
        pdl = pdl_enabled(self.x)

        def body() -> None:
            h = self.h0
            for w in self.ws:
                _producer[(self.m,)](h, h.stride(0), self.x, K=HID, PDL=pdl, launch_pdl=pdl)
                if path is not None:
                    h = path(self.x, w)  # q (or qkv): the producer reads its rows' start

        return graph_time_us(body, reps) / LAYERS


def compare(step: Step, cfg: TmaConfig) -> tuple[float, float]:
    """Relative max error of the fused q and cache against the two launches', one layer."""
    step.x.copy_(torch.randn_like(step.x))
    step.cache.zero_()
    q_ref = step.two_launches(step.x, step.ws[0]).float()
    cache_ref = step.cache.float().clone()
    step.cache.zero_()
    q = step.fused(step.x, step.ws[0], cfg).float()
    cache = step.cache.float()
    err_q = ((q - q_ref).abs().max() / q_ref.abs().max()).item()
    err_c = ((cache - cache_ref).abs().max() / cache_ref.abs().max()).item()
    return err_q, err_c


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="*", default=list(ROWS))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out = []
    print(f"PDL {pdl_enabled(torch.empty(1, device='cuda'))}")
    for m in args.rows:
        step = Step(m)
        base = step.chain_us(None, args.reps)
        two = step.chain_us(step.two_launches, args.reps) - base
        gemm_only = step.chain_us(step.gemm, args.reps) - base
        row = dict(m=m, two_launches_us=two, gemm_only_us=gemm_only, fused={})
        best = (float("inf"), None)
        for cfg in CONFIGS:
            err_q, err_c = compare(step, cfg)
            if max(err_q, err_c) > 2e-2:
                print(f"  M={m} {cfg}: WRONG (q {err_q:.3g}, cache {err_c:.3g})")
                continue
            t = step.chain_us(lambda x, w, c=cfg, s=step: s.fused(x, w, c), args.reps) - base
            row["fused"][str(cfg)] = dict(us=t, err_q=err_q, err_cache=err_c)
            best = min(best, (t, cfg), key=lambda r: r[0])
        t, cfg = best
        print(f"M={m:4d} two launches {two:6.2f} us (GEMM alone {gemm_only:6.2f})  fused best "
              f"{t:6.2f} {cfg}  gain {two - t:+5.2f} us a layer", flush=True)  # fmt: skip
        out.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
