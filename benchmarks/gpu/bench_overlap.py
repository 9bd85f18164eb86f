"""Would two half-batches on two streams beat one full batch? An experiment for issue 3.

A decode step at batch 256 is ~75% paged attention (bandwidth-bound, at ~3.8 TB/s) and
~15% small GEMMs that run at a third of their roofline (latency-bound: 5-8 us each). If the
two halves of the batch run their layers on two CUDA streams, one half's GEMMs can fill the
gaps of the other half's attention. This times a skeleton of Qwen3-0.6B's decode layers
(qkv GEMM -> paged attention -> o_proj -> gate_up -> down, 28 layers, per-layer weights,
real paged KV caches) captured in CUDA graphs:
  full      one stream, batch B
  halves    one stream, two batches of B/2 one after the other (the cost of splitting)
  streams   two streams, one half each, forked and joined inside the graph

python benchmarks/gpu/bench_overlap.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from check_attention import DTYPE, attn_call, make_batch  # noqa: E402
from graph_timing import graph_time_us  # noqa: E402
from sweep_decode_attn import _spread  # noqa: E402

LAYERS = 28
HIDDEN, QKV, Q, INTER = 1024, 4096, 2048, 3072


def layer_weights() -> list[tuple[torch.Tensor, ...]]:
    def w(n, k):
        return torch.randn(n, k, device="cuda", dtype=DTYPE) * 0.02

    return [
        (w(QKV, HIDDEN), w(HIDDEN, Q), w(2 * INTER, HIDDEN), w(HIDDEN, INTER))
        for _ in range(LAYERS)
    ]


def stack(ctxs: list[int], weights, seed: int):
    """The layer skeleton over one batch: returns a function that runs all layers."""
    rows = [(c - 1, 1) for c in ctxs]
    q, _, _, cache, md = make_batch(rows, DTYPE, seed=seed)
    x0 = torch.randn(len(ctxs), HIDDEN, device="cuda", dtype=DTYPE)
    attn = attn_call(q, cache, md, False)

    def run():
        x = x0
        for wqkv, wo, wgu, wd in weights:
            qkv = F.linear(x, wqkv)
            q.copy_(qkv[:, :Q].view_as(q))
            o = attn()
            x = F.linear(o.reshape(len(ctxs), Q), wo)
            gu = F.linear(x, wgu)
            x = F.linear(gu[:, :INTER], wd)
        return x

    return run


@contextmanager
def forked(*streams: torch.cuda.Stream):
    """Work queued on `streams` inside the block starts after, and is joined back into,
    the current stream (as graph capture needs)."""
    main = torch.cuda.current_stream()
    for s in streams:
        s.wait_stream(main)
    yield
    for s in streams:
        main.wait_stream(s)


def two_streams(run_a, run_b):
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def run():
        with forked(s1, s2):
            with torch.cuda.stream(s1):
                run_a()
            with torch.cuda.stream(s2):
                run_b()

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    weights = layer_weights()
    results = []
    for name, ctxs in (
        ("b256 ctx520", [520] * 256),
        ("b256 spread100-2000", _spread(256, 100, 2000)),
        ("b128 spread300-2000", _spread(128, 300, 2000, 1)),
    ):
        half = len(ctxs) // 2
        full = stack(ctxs, weights, 0)
        a, b = stack(ctxs[:half], weights, 1), stack(ctxs[half:], weights, 2)
        t_full = graph_time_us(full, reps=10)
        t_halves = graph_time_us(lambda a=a, b=b: (a(), b()), reps=10)
        t_streams = graph_time_us(two_streams(a, b), reps=10)
        kv = sum(ctxs) * 8 * 128 * 2 * 2 * LAYERS
        print(
            f"{name}: full {t_full / 1e3:.3f} ms, halves {t_halves / 1e3:.3f} ms, "
            f"two streams {t_streams / 1e3:.3f} ms ({t_full / t_streams:.3f}x); "
            f"KV {kv / 1e9:.2f} GB -> full at {kv / t_full / 1e6:.2f} TB/s"
        )
        results.append(
            {"shape": name, "full_us": t_full, "halves_us": t_halves, "streams_us": t_streams}
        )
        del full, a, b
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
