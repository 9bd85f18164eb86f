"""Would the decode GEMMs gain from loading their weight tiles before the PDL wait? A probe
for issue 3, written in Gluon (Triton's explicit layer) because Triton's own pipeliner
issues every stage's loads after the wait.

Session 21 measured +0.6-0.7% on the standard workload from issuing a few small loads
(RMSNorm's weight, the rotary rows) before `griddepcontrol.wait`. The GEMMs' weights are
the large case: a decode GEMM's weight comes from HBM (attention's streaming evicts it from
L2), and each of its programs starts that read only after the wait. Here a TMA GEMM
(x [M, K] @ w [N, K].T, fp32 accumulation, one rounding at the store) keeps STAGES tiles in
flight through a shared-memory ring with one mbarrier per stage (early_weight_gemm.py):
  EARLY: the first STAGES weight tiles are requested before the wait, x's after it (each
         stage's barrier expects both); the rest of the loop refills the ring as usual;
  not EARLY: the same kernel with every load after the wait (the control).

Timed as sweep_dense_gemm.py times GEMMs: 28 x [PDL producer -> GEMM] in one CUDA graph,
each with its own weight, minus the producers alone, per layer; against the engine's own
dispatch for the shape (split-K partials for o_proj / down at <= 128 rows, else Linear's
pointer / TMA tile GEMMs or cuBLAS). Split configs write fp32 K-slice partials, as the
engine's split-K does. Each config is checked against fp32 torch first.

python benchmarks/gpu/bench_early_weight_gemm.py [--json PATH] [--rows M ...]
H200, session 22: early and late within 0.47 us everywhere; the engine's GEMMs faster at most
shapes (docs/benchmarks.md, "Session 22").
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from early_weight_gemm import (  # noqa: E402
    EarlyConfig,
    early_gemm,
    early_gemm_partials,
    early_gemm_ref,
)
from sweep_dense_gemm import LAYERS, chain_us  # noqa: E402
from sweep_tma_gemm import SHAPES, engine_gemm  # noqa: E402  (N, K) of the decode GEMMs

from strixlm.kernels import splitk_linear as sk  # noqa: E402

CONFIGS = [
    EarlyConfig(64, 64, 128, 4),
    EarlyConfig(64, 32, 128, 4),
    EarlyConfig(64, 128, 64, 4),
    EarlyConfig(64, 64, 64, 6),
    EarlyConfig(128, 64, 128, 3),
    # K slices for the narrow outputs (o_proj, down), as the engine's split-K at <= 128 rows
    EarlyConfig(64, 64, 128, 4, split=4),
    EarlyConfig(64, 32, 128, 4, split=4),
]
HALF = dict(x_dtype=torch.bfloat16, w_dtype=torch.bfloat16, has_bias=False)


def engine_product(m: int, n: int, k: int):
    """What the engine runs for x @ w.T in a decode layer: split-K partials where o_proj /
    down take them (their first slice stands in for the output the producer reads), else
    Linear's plain product."""
    cfg = sk.plan(m, n, k, **HALF)
    if cfg is not None:
        return lambda a, b: sk.splitk_partials(a, b, cfg).parts[0]
    return engine_gemm(m, n, k)


def run_early(x, w, cfg: EarlyConfig, early: bool) -> torch.Tensor:
    """The product (split 1) or its partials summed (split > 1), for the check."""
    if cfg.split == 1:
        return early_gemm(x, w, cfg, early).float()
    return early_gemm_partials(x, w, cfg, early).parts.sum(0)


def chain_early(x, w, cfg: EarlyConfig, early: bool) -> torch.Tensor:
    """The chain's GEMM: its output, or its first partial slice (as engine_product)."""
    if cfg.split == 1:
        return early_gemm(x, w, cfg, early)
    return early_gemm_partials(x, w, cfg, early).parts[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[16, 32, 64, 128, 192, 256])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = []
    for name in args.shapes:
        n, k = SHAPES[name]
        torch.manual_seed(0)
        ws = [(0.02 * torch.randn(n, k, device="cuda")).to(torch.bfloat16) for _ in range(LAYERS)]
        for m in args.rows:
            base = chain_us(m, ws, None, False, args.reps)
            eng = chain_us(m, ws, engine_product(m, n, k), True, args.reps) - base
            row = dict(name=name, m=m, engine_us=eng, configs=[])
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = early_gemm_ref(x, ws[0]).float()
            for cfg in CONFIGS:
                if k % (cfg.split * cfg.block_k):
                    continue
                times = {}
                for early in (True, False):
                    try:
                        got = run_early(x, ws[0], cfg, early)
                    except Exception as e:  # noqa: BLE001 - a config that fails is a result
                        print(f"  {name} M={m} {cfg} early={early}: {type(e).__name__}: {e}"[:300])
                        break
                    err = ((got - ref).abs().max() / ref.abs().max()).item()
                    if err > 2e-2:
                        print(f"  {name} M={m} {cfg} early={early}: WRONG (rel err {err:.3g})")
                        break

                    def run(a, b, c=cfg, e=early):
                        return chain_early(a, b, c, e)

                    times[early] = chain_us(m, ws, run, True, args.reps) - base
                if len(times) == 2:
                    row["configs"].append(dict(cfg=asdict(cfg), early_us=times[True],
                                               late_us=times[False]))  # fmt: skip
                    print(f"{name:8s} M={m:4d} engine {eng:6.2f} us  {cfg}: early "
                          f"{times[True]:6.2f}  late {times[False]:6.2f}  "
                          f"vs engine {eng - times[True]:+5.2f}", flush=True)  # fmt: skip
            results.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
