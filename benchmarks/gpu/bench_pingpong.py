"""Can one half-batch's GEMMs hide under the other half's attention? A feasibility test.

Session 18's profile: at 141-256 decode rows a step is ~4.9 ms of paged attention (HBM-bound)
and ~1.2 ms of everything else (GEMMs at 40% of their tensor-core rate, small kernels), one
after the other. bench_overlap.py (session 4) ran two half-batches on two free streams and
lost: the unified attention kernel's thousands of programs filled every SM, so nothing
overlapped, and the split doubled the latency-bound GEMMs. This pipelines the halves in a
ping-pong instead, with the persistent attention grid sized to leave room on each SM:

    stream 1:  attn A(L) | A post(L) + A pre(L+1) | (waits attn B(L)) attn A(L+1) | ...
    stream 2:  (waits attn A(L)) attn B(L) | B post(L) + B pre(L+1) | ...

so the attention launches never run at once (they take all of HBM, and share the grid's
dynamic counters), and each half's GEMMs run beside the other half's attention. The layer
is bench_overlap's skeleton: qkv -> (q copy) -> persistent paged attention -> o_proj ->
gate_up -> down, 28 layers with their own weights, one real paged cache, in one CUDA graph.

Per shape: the full batch on one stream (the engine's grid, four programs per SM), the
two halves one after the other on one stream (what splitting costs), and the ping-pong with
the attention grid at 4, 3 and 2 programs per SM. Run it with STRIXLM_DISABLE_PDL=1 so
no variant gets PDL where another cannot.

    STRIXLM_DISABLE_PDL=1 python benchmarks/gpu/bench_pingpong.py [--json PATH]

H200, 2026-12-02 (docs/benchmarks.md, session 18): the ping-pong ran x0.95 of the full batch
at 4 programs per SM, and x0.70-0.90 at 2-3. Splitting costs 11-15%, and a smaller grid
stops attention from streaming. Not built into the engine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from bench_overlap import HIDDEN, INTER, LAYERS, Q, forked, layer_weights  # noqa: E402
from check_attention import DTYPE, HKV, SCALE, make_batch  # noqa: E402
from graph_timing import graph_time_us  # noqa: E402
from sweep_decode_attn import _spread  # noqa: E402

from strixlm.kernels import paged_decode as pdk  # noqa: E402
from strixlm.kernels.paged_attention import num_sms  # noqa: E402


class Half:
    """One batch's layer skeleton, cut where the ping-pong hands over: pre(L) (qkv, q
    copy), attn(L), post(L) (o_proj, gate_up, down)."""

    def __init__(self, ctxs: list[int], weights, seed: int, progs_per_sm: int) -> None:
        self.n, self.weights = len(ctxs), weights
        self.q, _, _, self.cache, self.md = make_batch([(c - 1, 1) for c in ctxs], DTYPE, seed)
        order = sorted(range(self.n), key=lambda i: -ctxs[i])  # the engine's longest first
        self.order = torch.tensor(order, dtype=torch.int32, device=self.q.device)
        self.x0 = torch.randn(self.n, HIDDEN, device="cuda", dtype=DTYPE)
        self.out = torch.empty_like(self.q)
        sms = num_sms(self.q.device)
        self.sms, self.programs = sms, max(1, min(self.n, sms * progs_per_sm // HKV))
        self.x = self.x0

    def pre(self, layer: int) -> None:
        if layer == 0:
            self.x = self.x0
        qkv = F.linear(self.x, self.weights[layer][0])
        self.q.copy_(qkv[:, :Q].view_as(self.q))

    def attn(self, layer: int) -> None:
        md = self.md
        pdk.paged_decode_persistent(
            self.q, self.cache, md.query_start_loc, md.seq_lens, md.block_table, SCALE, self.out,
            block_m=16, tile=64, num_warps=2, num_stages=pdk.PERSISTENT_STAGES, k_rows=False,
            sms=self.sms, seq_order=self.order, num_programs=self.programs,
        )  # fmt: skip

    def post(self, layer: int) -> None:
        _, wo, wgu, wd = self.weights[layer]
        x = F.linear(self.out.reshape(self.n, Q), wo)
        gu = F.linear(x, wgu)
        self.x = F.linear(gu[:, :INTER], wd)

    def run(self) -> None:
        for layer in range(LAYERS):
            self.pre(layer)
            self.attn(layer)
            self.post(layer)


def ping_pong(a: Half, b: Half):
    """Both halves on two streams, their attention launches alternating (events)."""
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def run() -> None:
        done_a = [torch.cuda.Event() for _ in range(LAYERS)]
        done_b = [torch.cuda.Event() for _ in range(LAYERS)]
        with forked(s1, s2):
            with torch.cuda.stream(s1):
                a.pre(0)
            with torch.cuda.stream(s2):
                b.pre(0)
            for layer in range(LAYERS):
                with torch.cuda.stream(s1):
                    if layer:
                        s1.wait_event(done_b[layer - 1])
                    a.attn(layer)
                    done_a[layer].record(s1)
                    a.post(layer)
                    if layer + 1 < LAYERS:
                        a.pre(layer + 1)
                with torch.cuda.stream(s2):
                    s2.wait_event(done_a[layer])
                    b.attn(layer)
                    done_b[layer].record(s2)
                    b.post(layer)
                    if layer + 1 < LAYERS:
                        b.pre(layer + 1)

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    weights = layer_weights()
    results = []
    shapes = (
        ("b256 spread100-2000", _spread(256, 100, 2000)),
        ("b256 ctx prompt+300", [c + 300 for c in _spread(256, 100, 1024, 3)]),
        ("b192 spread200-2000", _spread(192, 200, 2000, 1)),
    )
    for name, ctxs in shapes:
        half = len(ctxs) // 2
        full = Half(ctxs, weights, 0, pdk.PERSISTENT_CTAS_PER_SM)
        t_full = graph_time_us(full.run, reps=args.reps)
        kv = sum(ctxs) * HKV * 128 * 2 * 2 * LAYERS
        row = {"shape": name, "full_us": t_full, "pingpong_us": {}}
        print(f"{name}: full {t_full / 1e3:.3f} ms ({kv / t_full / 1e6:.2f} TB/s of KV)")
        del full
        for ctas in (pdk.PERSISTENT_CTAS_PER_SM, 3, 2):
            a = Half(ctxs[:half], weights, 1, ctas)
            b = Half(ctxs[half:], weights, 2, ctas)
            if ctas == pdk.PERSISTENT_CTAS_PER_SM:
                t_seq = graph_time_us(lambda a=a, b=b: (a.run(), b.run()), reps=args.reps)
                row["halves_one_stream_us"] = t_seq
                print(f"    halves on one stream {t_seq / 1e3:.3f} ms (x{t_full / t_seq:.3f})")
            t = graph_time_us(ping_pong(a, b), reps=args.reps)
            row["pingpong_us"][ctas] = t
            print(f"    ping-pong, attention at {ctas} programs / SM: {t / 1e3:.3f} ms"
                  f" (x{t_full / t:.3f} vs full)", flush=True)  # fmt: skip
            del a, b
            torch.cuda.empty_cache()
        results.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
