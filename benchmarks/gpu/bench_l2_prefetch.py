"""Do weights pulled into L2 before the PDL wait shorten a decode layer? (pdl.py's prefetches)

A Qwen3-0.6B-shaped decode layer without attention math, through the engine's own layers and
dispatch: add + RMSNorm -> qkv -> a streaming copy standing in for attention (it moves
--stream-mb through HBM and L2, as the KV reads do) -> o_proj (split-K partials where the
engine takes them) -> add + RMSNorm -> MLP (gate_up, SiLU, down). 28 layers with their own
weights (~0.9 GB, so no layer finds the last one's in L2) in one CUDA graph, timed per layer
at decode batch sizes for each combination of
  STRIXLM_GEMM_L2_PREFETCH      (our GEMMs ask for their own weight slice), and
  STRIXLM_NEXT_WEIGHT_PREFETCH  (the norms and SiLU ask for the next projection's weight),
0 off, 1 plain, 2 evict-last. The prefetches change no value: each combination's output is
checked to equal the one with both off.

The stand-in copy is a torch kernel, which takes no part in PDL, so o_proj cannot start
early behind it as it can behind the engine's attention; the step-level check is
profile_step.py / the workload (run_remeasure.sh l2ab).

    python benchmarks/gpu/bench_l2_prefetch.py [--rows 256 192 128 64 32] [--stream-mb 64]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import graph_timing  # noqa: E402
import torch  # noqa: E402

from strixlm.kernels import pdl  # noqa: E402
from strixlm.layers.linear import Linear  # noqa: E402
from strixlm.layers.norm import RMSNorm  # noqa: E402
from strixlm.models.llama import MLP  # noqa: E402

LAYERS = 28
HIDDEN, INTER, Q_OUT, QKV_OUT = 1024, 3072, 2048, 4096
MODES = ("00", "20", "02", "22", "11", "10", "01")  # GEMM mode, next-weight mode


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(HIDDEN), RMSNorm(HIDDEN)
        self.qkv = Linear(HIDDEN, QKV_OUT, bias=False)
        self.o_proj = Linear(Q_OUT, HIDDEN, bias=False)
        self.mlp = MLP(HIDDEN, INTER)
        for p in self.parameters():  # small weights keep bf16 sums finite over 28 layers
            p.data.normal_(0.0, 0.02)
        self.norm1.weight.data.fill_(1.0)
        self.norm2.weight.data.fill_(1.0)

    def forward(self, x, residual, attn_out, stream_src, stream_dst):
        h, residual = self.norm1(x, residual, prefetch=self.qkv.weight)
        qkv = self.qkv(h)
        if stream_src is not None:
            stream_dst.copy_(stream_src)
        o = self.o_proj.forward_partials(attn_out + qkv[:, :Q_OUT])
        h, residual = self.norm2(o, residual, prefetch=self.mlp.gate_up_proj.weight)
        return self.mlp(h, partials=True), residual


def set_modes(mode: str) -> None:
    # The launchers read these module globals on every call (l2_prefetch_mode,
    # next_weight_prefetch), so they can change between captures.
    pdl.L2_PREFETCH, pdl.NEXT_WEIGHT_PREFETCH = int(mode[0]), int(mode[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[256, 192, 128, 64, 32])
    ap.add_argument("--stream-mb", type=int, default=64)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)
    layers = [Layer().to(dev, dt) for _ in range(LAYERS)]
    n = args.stream_mb << 19  # bf16 elements per copy side
    src = torch.randn(n, device=dev, dtype=dt) if n else None
    dst = torch.empty_like(src) if n else None
    results = []
    for m in args.rows:
        x0 = torch.randn(m, HIDDEN, device=dev, dtype=dt)
        attn_out = torch.randn(m, Q_OUT, device=dev, dtype=dt) * 0.1
        res = torch.empty_like(x0)
        out: dict[str, torch.Tensor] = {}

        def step(x0=x0, res=res, attn_out=attn_out, out=out):
            x, r = x0, res
            r.copy_(x0)
            for layer in layers:
                x, r = layer(x, r, attn_out, src, dst)
            out["r"] = r

        row = {"rows": m, "us_per_layer": {}}
        ref = None
        with torch.no_grad():
            for mode in MODES:
                set_modes(mode)
                t = graph_timing.graph_time_us(step, reps=20) / LAYERS
                step()
                torch.cuda.synchronize()
                got = out["r"].clone()
                ref = got if ref is None else ref
                same = bool(torch.equal(got, ref))
                row["us_per_layer"][mode] = t
                row.setdefault("equal", {})[mode] = same
                base = row["us_per_layer"]["00"]
                print(
                    f"rows {m:3d}  gemm {mode[0]} next {mode[1]}: {t:7.2f} us/layer"
                    f" (x{base / t:.3f} vs off), output equal to off: {same}",
                    flush=True,
                )
        set_modes("00")
        results.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
