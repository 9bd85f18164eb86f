"""Can decode attention stream at the full rate on part of the GPU, with the GEMMs beside it
on the rest? A probe for issue 3's one lever with a large upper bound.

At 129-256 rows a decode layer spends ~35 us in latency-bound GEMMs and small kernels next
to ~100-200 us of attention that reads its KV at the copy rate. Two half-batches whose
GEMMs run under each other's attention would hide most of that, but sessions 4 and 18
found no room for it: the attention grid fills every SM, and a grid of 2-3 programs an SM
streams 14-30% slower (bench_pingpong.py). A green context confines the attention grid to
n SMs, each with the engine's four programs, and leaves the other SMs wholly free.
(torch's GreenContext.create takes a count, not a set, so two contexts may share SMs:
the GEMMs run on an ordinary stream, whose blocks can land only where room is left, which
is mostly the SMs outside the attention's context.) Per n (CUDA events, eager launches):
  attn      the persistent decode grid (the engine's config, sized for n SMs) on n SMs
  both      that, with 28 layers of the MLP-side GEMMs (cuBLAS: qkv, o_proj, gate_up,
            down at `--gemm-rows` rows) on an ordinary stream at the same time
against the baseline: attention then the GEMMs, one stream, all SMs. If attention on
~100-116 SMs keeps >= 97% of its all-SM rate and `both` is about max(attn, GEMMs alone),
the SM-partitioned ping-pong (bench_pingpong_green.py) is worth a session; if not, not.

python benchmarks/gpu/probe_sm_partition.py [--json PATH] [--sms 120 96] [--gemm-rows 128]

Hopper partitions SMs in groups of 8, so the counts are multiples of 8.

Written without a GPU (sessions 49-50): untested.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from check_attention import DTYPE, SCALE, make_batch  # noqa: E402
from sweep_decode_attn import _spread  # noqa: E402

from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels import paged_decode as pdk  # noqa: E402
from strixlm.models import pingpong  # noqa: E402

LAYERS = 28
HIDDEN, QKV, Q, INTER = 1024, 4096, 2048, 3072


@functools.cache
def _engine_config(hq: int, hkv: int, d: int, num_seqs: int, max_ctx: int, sms: int):
    """select_config's one-query decode pick (host ints only: looked up once per shape)."""
    return pa.select_config(hq, hkv, d, num_seqs, 1, max_ctx, sms)


def engine_attention(q, cache, md, out, order, max_ctx: int, sms: int, timing=None) -> None:
    """One decode attention launch with the engine's config for this batch (persistent at
    these sizes), its grid sized for `sms` SMs; timing: paged_decode_persistent's per-program
    records (start, end, SM id, tiles)."""
    cfg = _engine_config(q.shape[1], cache.shape[3], q.shape[2], order.numel(), max_ctx, sms)
    pdk.paged_decode_persistent(
        q, cache, md.query_start_loc, md.seq_lens, md.block_table, SCALE, out,
        block_m=cfg.block_m, tile=cfg.tile, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        k_rows=cfg.k_rows, sms=sms, seq_order=order, num_segs=cfg.num_splits,
        ctas_per_sm=cfg.ctas_per_sm, timing=timing,
    )  # fmt: skip


def sms_used(stream, q, cache, md, out, order, max_ctx: int, sms: int, graph=False) -> int:
    """Distinct SMs one attention launch on `stream` ran on (its programs' SM ids): whether
    a green context confines it as asked. graph: the launch captured in a CUDA graph (forked
    from the capturing stream, as the engine's ping-pong is) and replayed, since a graph's
    nodes might not keep the green context of the stream they were captured from."""
    timing = torch.full((cache.shape[3] * sms * 16 * 4,), -1, dtype=torch.int64, device="cuda")

    def launch() -> None:
        with torch.cuda.stream(stream):
            engine_attention(q, cache, md, out, order, max_ctx, sms, timing)

    if graph:
        captured(launch, [stream]).replay()
    else:
        stream.wait_stream(torch.cuda.current_stream())
        launch()
        torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    ids = timing.view(-1, 4)[:, 2]
    return int(torch.unique(ids[ids >= 0]).numel())


def green_stream(num_sms: int) -> torch.cuda.Stream | None:
    """The engine's green-context stream (models/pingpong.py), or None, with the reason
    printed, where one cannot be made."""
    try:
        return pingpong.green_stream(num_sms, torch.device("cuda"))
    except (RuntimeError, TypeError) as e:
        print(f"green context of {num_sms} SMs: {type(e).__name__}: {e}")
        return None


def captured(work, streams: list[torch.cuda.Stream]) -> torch.cuda.CUDAGraph:
    """work() captured in one CUDA graph, forked to and joined from `streams` (the engine
    captures its ping-pong this way: does a green stream's work survive capture?)."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        cur = torch.cuda.current_stream()
        for s in streams:
            s.wait_stream(cur)
        work()
        for s in streams:
            cur.wait_stream(s)
    return g


def timed_ms(work, streams: list[torch.cuda.Stream], reps: int = 10) -> float:
    """Median wall time (ms) of work() with all of it queued on `streams`, from an event on
    the current stream before to one after, with every stream joined back."""
    main = torch.cuda.current_stream()
    times = []
    for _ in range(reps + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(main)
        for s in streams:
            s.wait_stream(main)
        work()
        for s in streams:
            main.wait_stream(s)
        end.record(main)
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times[2:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--sms", type=int, nargs="+", default=[120, 112, 104, 96, 88])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--gemm-rows", type=int, default=128)
    args = ap.parse_args()
    total = torch.cuda.get_device_properties(0).multi_processor_count
    ctxs = _spread(args.batch, 100, 2000)
    q, _, _, cache, md = make_batch([(c - 1, 1) for c in ctxs], DTYPE)
    order = torch.tensor(sorted(range(len(ctxs)), key=lambda i: -ctxs[i]), dtype=torch.int32)
    order = order.cuda()
    out = torch.empty_like(q)
    kv_bytes = sum(ctxs) * 8 * 128 * 2 * cache.element_size() * LAYERS
    weights = [
        tuple(torch.randn(n, k, device="cuda", dtype=DTYPE) * 0.02 for n, k in shapes)
        for shapes in [((QKV, HIDDEN), (HIDDEN, Q), (2 * INTER, HIDDEN), (HIDDEN, INTER))] * LAYERS
    ]
    x = torch.randn(args.gemm_rows, HIDDEN, device="cuda", dtype=DTYPE)
    o_in = torch.randn(args.gemm_rows, Q, device="cuda", dtype=DTYPE)
    d_in = torch.randn(args.gemm_rows, INTER, device="cuda", dtype=DTYPE)

    def attn(sms: int) -> None:
        for _ in range(LAYERS):
            engine_attention(q, cache, md, out, order, max(ctxs), sms)

    def gemms() -> None:
        for wqkv, wo, wgu, wd in weights:
            F.linear(x, wqkv)
            F.linear(o_in, wo)
            F.linear(x, wgu)
            F.linear(d_in, wd)

    rows = []
    attn(total)  # compile outside the timings
    gemms()
    torch.cuda.synchronize()
    plain = torch.cuda.Stream()
    t_attn_all = timed_ms(lambda: attn(total), [])
    all_sms = sms_used(torch.cuda.current_stream(), q, cache, md, out, order, max(ctxs), total)
    print(f"the whole GPU: attention's programs ran on {all_sms} distinct SMs")
    t_gemm = timed_ms(gemms, [])
    t_serial = timed_ms(lambda: (attn(total), gemms()), [])

    def on(stream, fn, *a):
        with torch.cuda.stream(stream):
            fn(*a)

    # Session 4's control: the two on free streams, attention's grid on every SM.
    free = torch.cuda.Stream()
    t_free = timed_ms(lambda: (on(free, attn, total), on(plain, gemms)), [free, plain])
    print(
        f"all {total} SMs, one stream: attention {t_attn_all:.3f} ms"
        f" ({kv_bytes / t_attn_all / 1e9:.2f} TB/s), GEMMs {t_gemm:.3f} ms, one after the"
        f" other {t_serial:.3f} ms; on two free streams {t_free:.3f} ms"
    )
    rows.append(
        {"attn_all_ms": t_attn_all, "gemm_all_ms": t_gemm, "serial_ms": t_serial,
         "free_streams_ms": t_free}
    )  # fmt: skip

    capture_ok = True
    for n in args.sms:
        if n >= total:
            continue
        s_attn = green_stream(n)
        if s_attn is None:
            print(f"{n} SMs: no green context here; stopping")
            break

        def both(n=n, sa=s_attn):
            on(sa, attn, n)
            on(plain, gemms)

        try:
            t_attn = timed_ms(lambda n=n, s=s_attn: on(s, attn, n), [s_attn])
            t_both = timed_ms(both, [s_attn, plain])
        except Exception as e:  # a launch the green context's stream refused
            print(f"{n} SMs: {type(e).__name__}: {e}; stopping")
            break
        row = {"attn_sms": n, "attn_ms": t_attn, "attn_tbs": kv_bytes / t_attn / 1e9}
        row["both_ms"] = t_both
        row["distinct_sms"] = sms_used(s_attn, q, cache, md, out, order, max(ctxs), n)
        print(f"    {n} SMs asked: its programs ran on {row['distinct_sms']} distinct SMs")
        print(
            f"attention on {n:3d} SMs: {t_attn:7.3f} ms ({row['attn_tbs']:.2f} TB/s,"
            f" x{t_attn_all / t_attn:.3f} of all SMs); with the GEMMs beside it {t_both:7.3f} ms"
            f" (x{t_serial / t_both:.3f} of one after the other; max of the parts"
            f" {max(t_attn, t_gemm):.3f})",
            flush=True,
        )
        if capture_ok:  # the same work as one CUDA graph, as the engine would replay it
            try:
                g = captured(both, [s_attn, plain])
                row["both_graph_ms"] = timed_ms(g.replay, [])
                print(f"    captured in a CUDA graph: {row['both_graph_ms']:.3f} ms")
                args_ = (q, cache, md, out, order, max(ctxs), n)
                row["distinct_sms_graph"] = sms_used(s_attn, *args_, graph=True)
                print(f"    in a graph replay its programs ran on {row['distinct_sms_graph']} SMs")
            except Exception as e:  # said once; the other SM counts run eagerly only
                capture_ok = False
                row["graph_error"] = f"{type(e).__name__}: {e}"
                print(f"    graph capture failed: {row['graph_error']}")
        rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
