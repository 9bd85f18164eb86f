"""bench_pingpong.py's two half-batches, with the attention grid confined to n SMs.

Session 18's ping-pong lost (x0.95 of the full batch at four programs an SM, x0.70-0.90 at
two or three): the attention grid filled the SMs the other half's GEMMs needed, and a
smaller grid stopped it streaming. Here a green context gives attention n SMs, each with
the engine's four programs; the GEMMs run on an ordinary stream, whose blocks find the
other SMs free (torch's GreenContext.create takes a count, so a second context could
overlap the first):

    attention stream (n SMs):  attn A(L) | attn B(L) | attn A(L+1) | attn B(L+1) | ...
    GEMM stream:                         | A post(L), A pre(L+1) | B post(L), B pre(L+1) | ...

Each attention launch waits for its half's qkv (pre); each post waits for its half's
attention. The layers are bench_pingpong's skeleton (qkv -> q copy -> persistent attention
-> o_proj -> gate_up -> down, 28 layers, one real paged cache per half), with the engine's
attention config sized for the SMs it gets. Everything runs eagerly (graph capture across
green contexts is not assumed), timed by CUDA events: the full batch on all SMs, the two
halves one after the other on all SMs, and the confined ping-pong per n.

    STRIXLM_DISABLE_PDL=1 python benchmarks/gpu/bench_pingpong_green.py [--json PATH]

Written without a GPU (session 49): untested.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from bench_overlap import LAYERS, layer_weights  # noqa: E402
from bench_pingpong import Half  # noqa: E402
from probe_sm_partition import engine_attention, green_stream, timed_ms  # noqa: E402
from sweep_decode_attn import _spread  # noqa: E402

from strixlm.kernels import paged_decode as pdk  # noqa: E402


class EngineHalf(Half):
    """A half-batch whose attention takes the engine's config for `sms` SMs."""

    def __init__(self, ctxs: list[int], weights, seed: int, sms: int) -> None:
        super().__init__(ctxs, weights, seed, pdk.PERSISTENT_CTAS_PER_SM)
        self.max_ctx, self.sms = max(ctxs), sms

    def attn(self, layer: int) -> None:
        engine_attention(self.q, self.cache, self.md, self.out, self.order, self.max_ctx, self.sms)


def partitioned(a: Half, b: Half, s_attn: torch.cuda.Stream, s_gemm: torch.cuda.Stream):
    """The ping-pong with every attention launch on s_attn and the rest on s_gemm."""

    def run() -> None:
        ev = {k: [torch.cuda.Event() for _ in range(LAYERS + 1)] for k in ("pa", "pb", "aa", "ab")}
        with torch.cuda.stream(s_gemm):
            a.pre(0)
            ev["pa"][0].record(s_gemm)
            b.pre(0)
            ev["pb"][0].record(s_gemm)
        for layer in range(LAYERS):
            with torch.cuda.stream(s_attn):
                for half, pre, done in ((a, "pa", "aa"), (b, "pb", "ab")):
                    s_attn.wait_event(ev[pre][layer])
                    half.attn(layer)
                    ev[done][layer].record(s_attn)
            with torch.cuda.stream(s_gemm):
                for half, pre, done in ((a, "pa", "aa"), (b, "pb", "ab")):
                    s_gemm.wait_event(ev[done][layer])
                    half.post(layer)
                    if layer + 1 < LAYERS:
                        half.pre(layer + 1)
                        ev[pre][layer + 1].record(s_gemm)

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--sms", type=int, nargs="+", default=[120, 112, 96])
    ap.add_argument("--reps", type=int, default=8)
    args = ap.parse_args()
    total = torch.cuda.get_device_properties(0).multi_processor_count
    weights = layer_weights()
    results = []
    for name, ctxs in (
        ("b256 spread100-2000", _spread(256, 100, 2000)),
        ("b192 spread200-2000", _spread(192, 200, 2000, 1)),
    ):
        half = len(ctxs) // 2
        full = EngineHalf(ctxs, weights, 0, total)
        full.run()
        torch.cuda.synchronize()
        t_full = timed_ms(full.run, [], args.reps)
        del full
        a = EngineHalf(ctxs[:half], weights, 1, total)
        b = EngineHalf(ctxs[half:], weights, 2, total)
        t_halves = timed_ms(lambda a=a, b=b: (a.run(), b.run()), [], args.reps)
        print(f"{name}: full batch {t_full:.3f} ms, two halves one after the other"
              f" {t_halves:.3f} ms (x{t_full / t_halves:.3f})", flush=True)  # fmt: skip
        row = {"shape": name, "full_ms": t_full, "halves_ms": t_halves, "partitioned_ms": {}}
        for n in args.sms:
            s_attn, s_gemm = green_stream(n), torch.cuda.Stream()
            if s_attn is None:
                print("    no green contexts here; stopping")
                break
            a2 = EngineHalf(ctxs[:half], weights, 1, n)
            b2 = EngineHalf(ctxs[half:], weights, 2, n)
            run = partitioned(a2, b2, s_attn, s_gemm)
            try:
                run()
                torch.cuda.synchronize()
                t = timed_ms(run, [s_attn, s_gemm], args.reps)
            except Exception as e:  # a launch the green context's stream refused
                print(f"    {n} SMs: {type(e).__name__}: {e}; stopping")
                break
            row["partitioned_ms"][n] = t
            print(f"    attention confined to {n} SMs: {t:.3f} ms"
                  f" (x{t_full / t:.3f} vs the full batch)", flush=True)  # fmt: skip
            del a2, b2
        del a, b
        torch.cuda.empty_cache()
        results.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
