"""Does a warp-specialized persistent MLP beat the engine's MLP kernels at small decode
batches? A probe for issue 3: the first piece of a persistent decode layer, after session
21's Triton dataflow probe lost to per-task pipeline ramps (ws_mlp.py says why this one
differs: one warp streams every task's weights ahead of all dependency waits).

For each row count (M <= 64: the run's tail and batch-1 latency) it times, per layer, 28 x
[the engine's add + RMSNorm -> MLP] in one CUDA graph with per-layer weights, as
bench_dataflow_mlp.py does:
  engine: the engine's MLP dispatch (partials for the next norm where it makes them);
  ws:     ws_mlp's one launch, its fp32 partials summed by the same norm.
Before timing, each config's partials are checked against the torch chain (gate and up
rounded to bf16, silu_mul's roundings, fp32 K-slice partials) and its counters after one
launch without the reset against what every task should have added; after timing the values
are checked again (the counters reset across replays).

python benchmarks/gpu/bench_ws_mlp.py [--json PATH] [--rows M ...] [--configs I ...]

H200, 2026-12-04 (session 36, docs/benchmarks.md): slower than the engine at every row count
and config (x0.52-0.80). Beside each config it also times its weight stream alone (no MMA, no
stores, no waits) and the kernel without down's waits, to show where the time goes.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_dataflow_mlp import HIDDEN, INTER, MlpChains, check  # noqa: E402
from ws_mlp import WsConfig, WsMLP  # noqa: E402

CONFIGS = [
    WsConfig(block_n=16, block_k=128, split=4, stages=8),
    WsConfig(block_n=32, block_k=128, split=4, stages=4),
    WsConfig(block_n=32, block_k=128, split=3, stages=4),
    WsConfig(block_n=16, block_k=128, split=4, stages=8, lag=3),
    WsConfig(block_n=32, block_k=128, split=4, stages=4, lag=2),
    WsConfig(block_n=32, block_k=128, split=3, stages=4, lag=3),
    WsConfig(block_n=32, block_k=64, split=4, stages=8, lag=4),
    WsConfig(block_n=16, block_k=64, split=4, stages=16, lag=8),
]


def counters_ok(mlp: WsMLP, device, dtype) -> bool:
    """One launch without the reset: every gate_up task released its slice once and every
    program finished once. Zeroes the counters after."""
    x = torch.randn(mlp.rows, HIDDEN, device=device, dtype=dtype)
    w_gu = torch.randn(2 * INTER, HIDDEN, device=device, dtype=dtype) * 0.03
    w_d = torch.randn(HIDDEN, INTER, device=device, dtype=dtype) * 0.03
    mlp(x, w_gu, w_d, reset=False)
    got = mlp.sync.tolist()
    mlp.sync.zero_()
    if got != mlp.expected_counters():
        print(f"  counters {got[:2]}... expected {mlp.expected_counters()[:2]}...", flush=True)
        return False
    return True


def gpu_main(args) -> dict:
    dev, dt = torch.device("cuda"), torch.bfloat16
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    chains = MlpChains(dev, dt)
    configs = [CONFIGS[i] for i in args.configs] if args.configs else CONFIGS
    results: dict = {"sms": sms, "rows": {}}
    for m in args.rows:
        x0 = torch.randn(m, HIDDEN, device=dev, dtype=dt)
        res = torch.randn(m, HIDDEN, device=dev, dtype=dt)
        row: dict = {"engine_us": chains.engine_us(x0, res)}
        print(f"M {m}: engine add/RMSNorm + MLP {row['engine_us']:.2f} us/layer", flush=True)
        for cfg in configs:
            ws = WsMLP(cfg, HIDDEN, INTER, m, dev, dt, sms)
            try:
                err = check(ws, m, dev, dt)  # the dataflow probe's: same call, same chain
                counted = counters_ok(ws, dev, dt)
            except Exception as e:  # noqa: BLE001 - a config that fails to build is a result
                print(f"  {cfg}: failed: {type(e).__name__}: {e}"[:400], flush=True)
                continue

            us = chains.probe_us(ws, x0, res)
            again = check(ws, m, dev, dt, seed=3)
            stream_us = chains.probe_us(partial(ws, stream_only=True), x0, res)
            nowait_us = chains.probe_us(partial(ws, no_wait=True), x0, res)
            ws.sync.zero_()  # no_wait leaves the counters short of a reset
            row[str(asdict(cfg))] = {
                "us": us, "stream_only_us": stream_us, "no_wait_us": nowait_us, "rel_err": err,
                "rel_err_after": again, "counters_ok": counted,
            }  # fmt: skip
            print(
                f"  {cfg}: {us:.2f} us/layer (x{row['engine_us'] / us:.3f}; its weight stream "
                f"alone {stream_us:.2f}, no waits {nowait_us:.2f}), rel err {err:.2e} / "
                f"{again:.2e}, counters {'ok' if counted else 'WRONG'}",
                flush=True,
            )
        results["rows"][m] = row
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 16, 32, 48, 64])
    ap.add_argument("--json", default=None)
    ap.add_argument("--configs", type=int, nargs="*", default=None, help="indices into CONFIGS")
    args = ap.parse_args()
    results = gpu_main(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
