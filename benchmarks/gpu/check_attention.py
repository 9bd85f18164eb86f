"""GPU check of the Triton paged attention (KV write + unified / split-K attention).

Qwen3-0.6B attention shape: 16 q heads, 8 kv heads, head_dim 128, block 16, bf16 (and an
fp8 e4m3 cache). For each case: error vs an fp32 reference over the same paged cache
(paged_attention_ref), next to the torch backend's own error; then median times
(triton.testing.do_bench) of the Triton attention kernel alone, the Triton backend
(write + attention), the torch backend, and torch SDPA on a contiguous cache (the flash
peer, decode and prefill only). Decode bandwidth = KV bytes read / attention time, against
~4.3 TB/s achievable on the H200. Then a CUDA-graph capture + replay of the decode path
(padded tokens and sequences, upper-bound host sizes, split and no split).

    python benchmarks/gpu/check_attention.py [--sweep [--sweep-only REGEX] [--sweep-alone]]
        [--quick] [--json PATH]

--sweep also times tile / warps / stages / split variants per shape and prints the best
(to tune select_config / choose_num_splits). Prints a table; writes JSON to
$OUT/check_attention.json when OUT is set. Exit 1 if a correctness check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a plain checkout

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels import paged_decode_fp8 as pdf8  # noqa: E402
from strixlm.layers.attention.metadata import AttentionMetadata  # noqa: E402
from strixlm.layers.attention.torch_paged import TorchPagedAttention  # noqa: E402
from strixlm.layers.attention.triton_paged import TritonPagedAttention  # noqa: E402

HQ, HKV, D, BS = 16, 8, 128, 16
SCALE = D**-0.5
PEAK_BW = 4.3e12
# Mixed steps, as (cached context, new tokens) per sequence: a 512-token chunk beside 63
# decodes of 100-4000 tokens, and the standard workload's admission step (a budget of
# ~600-token prompts beside decodes).
MIXED_ROWS = [(1024, 512)] + [(int(c), 1) for c in torch.linspace(100, 4000, 63).tolist()]
ADMISSION_ROWS = [(0, 600)] * 13 + [(700, 1)] * 64
DEV = "cuda"
DTYPE = torch.bfloat16  # model dtype (q, k, v and the non-fp8 cache)
# Relative L2 error vs the fp32 reference: bf16 output rounding alone is ~2e-3.
REL_TOL = 1e-2
FP8_SCALE = 0.01  # randn / 0.01 ~ +-400: uses the e4m3 range


class Case:
    def __init__(self, name: str, rows: list[tuple[int, int]], cache_dtype=None, gluon=True):
        self.name, self.rows, self.cache_dtype = name, rows, cache_dtype or DTYPE
        self.gluon = gluon  # False: fp8 decode on the Triton kernels (paged_decode_fp8 off)


def make_batch(rows, cache_dtype, seed=0, pad_tokens=0, pad_seqs=0, max_seq_len=None):
    """Random q/k/v and cache; blocks shuffled over the pool; metadata like the runner's."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    qlens = [q for _, q in rows]
    slens = [c + q for c, q in rows]
    nblk = [-(-s // BS) for s in slens]
    num_blocks = sum(nblk) + 8
    perm = torch.randperm(num_blocks, device=DEV, generator=g).to(torch.int32)
    bt = torch.zeros((len(rows) + pad_seqs, max(nblk)), dtype=torch.int32, device=DEV)
    off = 0
    slots = []
    for i, ((c, q), n) in enumerate(zip(rows, nblk, strict=True)):
        bt[i, :n] = perm[off : off + n]
        off += n
        pos = torch.arange(c, c + q, device=DEV)
        slots.append(bt[i, pos // BS].long() * BS + pos % BS)
    t = sum(qlens)
    slots.append(torch.full((pad_tokens,), -1, dtype=torch.int64, device=DEV))
    n = t + pad_tokens
    bf = DTYPE
    cache = torch.randn((2, num_blocks, BS, HKV, D), device=DEV, generator=g, dtype=bf)
    if cache_dtype == kvw.FP8_DTYPE:
        cache = kvw.quantize_fp8_ref(cache, FP8_SCALE)
    q = torch.randn((n, HQ, D), device=DEV, generator=g, dtype=bf)
    k = torch.randn((n, HKV, D), device=DEV, generator=g, dtype=bf)
    v = torch.randn((n, HKV, D), device=DEV, generator=g, dtype=bf)
    qsl = [0]
    for x in qlens:
        qsl.append(qsl[-1] + x)
    decode = [i for i, x in enumerate(qlens) if x == 1]
    md = AttentionMetadata(
        num_tokens=t,
        query_start_loc=torch.tensor(qsl + [qsl[-1]] * pad_seqs, dtype=torch.int32, device=DEV),
        seq_lens=torch.tensor(slens + [0] * pad_seqs, dtype=torch.int32, device=DEV),
        block_table=bt,
        slot_mapping=torch.cat(slots),
        query_start_loc_cpu=qsl,
        query_lens_cpu=qlens,
        seq_lens_cpu=slens,
        max_query_len=max(qlens),
        max_seq_len=max_seq_len or max(slens),
        decode_rows=torch.tensor(decode, device=DEV) if decode else None,
        max_decode_seq_len=max((slens[i] for i in decode), default=0),
    )
    return q, k, v, cache, md


def cache_scale(cache: torch.Tensor) -> float:
    """The K / V scale make_batch quantized an fp8 cache with (1.0 for other caches)."""
    return FP8_SCALE if cache.dtype == kvw.FP8_DTYPE else 1.0


def batch_reference(q: torch.Tensor, cache: torch.Tensor, md) -> torch.Tensor:
    """fp32 attention of make_batch's batch over its cache (fp8 dequantized)."""
    s = cache_scale(cache)
    return pa.paged_attention_ref(
        q.float(), cache, md.query_lens_cpu, md.seq_lens_cpu, md.block_table, SCALE, s, s
    )


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    d = out.float() - ref.float()
    return (d.norm() / ref.float().norm()).item(), d.abs().max().item()


def triton_backend(scale_fp8: bool, num_splits=None) -> TritonPagedAttention:
    be = TritonPagedAttention(HQ, HKV, D, SCALE)
    if scale_fp8:
        be.k_scale = be.v_scale = FP8_SCALE
    be.num_splits = num_splits
    return be


def attn_call(q, cache, md, fp8: bool, config=None, num_splits=None, seq_order=None, k=None,
              v=None):  # fmt: skip
    """paged_attention on a batch; k / v: the step's new rows, as the backend hands them."""
    s = FP8_SCALE if fp8 else 1.0
    return lambda: pa.paged_attention(
        q, cache, md.query_start_loc, md.seq_lens, md.block_table, SCALE,
        max_query_len=md.max_query_len, max_seq_len=md.max_seq_len,
        k_scale=s, v_scale=s, config=config, num_splits=num_splits, seq_order=seq_order,
        k_new=k, v_new=v,
    )  # fmt: skip


def bench(fn, quick: bool) -> float:
    return do_bench(fn, warmup=5 if quick else 25, rep=30 if quick else 100, return_mode="median")


def sdpa_peer(rows, q, quick: bool) -> tuple[float | None, str]:
    """Flash SDPA on a contiguous cache: uniform decode batches and single prefills only."""
    ctxs = {c + x for c, x in rows}
    qlens = {x for _, x in rows}
    # Uniform rows only; SDPA's is_causal aligns top-left, so no cached prefix with ql > 1.
    if len(ctxs) != 1 or len(qlens) != 1 or (qlens != {1} and any(c for c, _ in rows)):
        return None, "n/a"
    b, s, ql = len(rows), ctxs.pop(), qlens.pop()
    kk = torch.randn((b, HKV, s, D), device=DEV, dtype=q.dtype)
    vv = torch.randn_like(kk)
    qq = q[: b * ql].view(b, ql, HQ, D).transpose(1, 2)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run():
        return F.scaled_dot_product_attention(
            qq, kk, vv, is_causal=ql > 1, scale=SCALE, enable_gqa=True
        )

    err = ""
    for name, backends in (("flash", [SDPBackend.FLASH_ATTENTION]), ("default", None)):
        try:
            if backends is None:
                run()
                return bench(run, quick) * 1e3, name
            with sdpa_kernel(backends):
                run()
                return bench(lambda: run(), quick) * 1e3, name
        except Exception as e:  # flash may refuse a shape; fall back to the default dispatch
            err = f"{type(e).__name__}: {str(e)[:100]}"
            continue
    print(f"  sdpa peer failed: {err}")
    return None, "failed"


def run_case(case: Case, quick: bool) -> dict[str, Any]:
    enabled = pdf8.ENABLED
    pdf8.ENABLED = enabled and case.gluon
    try:
        return _run_case(case, quick)
    finally:
        pdf8.ENABLED = enabled


def _run_case(case: Case, quick: bool) -> dict[str, Any]:
    fp8 = case.cache_dtype == kvw.FP8_DTYPE
    q, k, v, cache, md = make_batch(case.rows, case.cache_dtype)
    t = md.num_tokens
    cfg = pa.select_config(
        HQ, HKV, D, len(case.rows), md.max_query_len, md.max_seq_len, pa.num_sms(q.device)
    )
    res: dict[str, Any] = {"case": case.name, "config": str(cfg)}
    if fp8 and md.max_query_len == 1 and pdf8.supports(q, cache, BS, len(case.rows)):
        segs = pdf8.num_segments(len(case.rows), HKV, md.max_seq_len)
        res["config"] = f"paged_decode_fp8 (Gluon), {segs} segment(s)"
    tri_cache = cache.clone()
    out = triton_backend(fp8).forward(q, k, v, tri_cache, md)
    torch.cuda.synchronize()
    ref_cache = cache.clone()
    kvw.write_kv_ref(ref_cache, k, v, md.slot_mapping, FP8_SCALE, FP8_SCALE)
    res["cache_equal"] = bool(torch.equal(tri_cache.view(torch.uint8), ref_cache.view(torch.uint8)))
    s = FP8_SCALE if fp8 else 1.0
    ref_kv = ref_cache
    if fp8 and pa.FP8_FRESH_ENABLED and md.max_query_len > pa.SPLIT_MAX_QUERY_LEN:
        # The unified kernel reads the step's own K / V unquantized (fresh_rows).
        ref_kv = kvw.dequantize_cache(ref_cache, s, s)
        kvw.write_kv_ref(ref_kv, k.float(), v.float(), md.slot_mapping)
        s = 1.0
    ref = pa.paged_attention_ref(
        q.float(), ref_kv, md.query_lens_cpu, md.seq_lens_cpu, md.block_table, SCALE, s, s
    )
    res["rel_err"], res["max_abs"] = rel_err(out[:t], ref)
    if not fp8:  # the torch backend knows no fp8 scales
        tout = TorchPagedAttention(HQ, HKV, D, SCALE).forward(q, k, v, cache.clone(), md)
        res["torch_rel_err"] = rel_err(tout, ref)[0]
    res["ok"] = res["cache_equal"] and res["rel_err"] < REL_TOL
    del ref_cache
    res["t_attn_us"] = bench(attn_call(q, tri_cache, md, fp8, k=k, v=v), quick) * 1e3
    be = triton_backend(fp8)
    res["t_backend_us"] = bench(lambda: be.forward(q, k, v, tri_cache, md), quick) * 1e3
    if not fp8:
        tb = TorchPagedAttention(HQ, HKV, D, SCALE)
        try:
            res["t_torch_us"] = bench(lambda: tb.forward(q, k, v, tri_cache, md), quick) * 1e3
        except torch.OutOfMemoryError:
            res["t_torch_us"] = None
    res["t_sdpa_us"], res["sdpa_backend"] = sdpa_peer(case.rows, q, quick)
    if md.max_query_len == 1:
        kv_bytes = sum(md.seq_lens_cpu) * HKV * D * 2 * cache.element_size()
        res["bw_tbs"] = kv_bytes / (res["t_attn_us"] * 1e-6) / 1e12
        res["bw_frac"] = res["bw_tbs"] * 1e12 / PEAK_BW
    return res


def capture(fn) -> tuple[Any, torch.Tensor]:
    """Warm up (compiles Triton kernels) on a side stream, then capture fn in a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph.replay, out


def graph_check(
    num_splits: int | None,
    b_real: int = 48,
    b_pad: int = 64,
    max_len: int = 4096,
    fp8: bool = False,
) -> dict[str, Any]:
    """Capture write + attention once at padded sizes, replay on two different steps.

    48 real decode rows padded to 64 tokens (slot -1) and 64 sequences (zero length), with
    max_seq_len = 4096 as the host upper bound; each step refills the captured tensors.
    fp8: over an fp8 cache (paged_attention's fp8 decode path, the Gluon kernel on sm90).
    """
    width = max_len // BS
    num_blocks = b_real * width + 8
    bf = DTYPE
    cache = torch.randn((2, num_blocks, BS, HKV, D), device=DEV, dtype=bf)
    s = FP8_SCALE if fp8 else 1.0
    if fp8:
        cache = kvw.quantize_fp8_ref(cache, s)
    q = torch.zeros((b_pad, HQ, D), device=DEV, dtype=bf)
    k = torch.zeros((b_pad, HKV, D), device=DEV, dtype=bf)
    v = torch.zeros_like(k)
    qsl = torch.tensor(list(range(b_real + 1)) + [b_real] * (b_pad - b_real), device=DEV)
    qsl = qsl.to(torch.int32)
    seq_lens = torch.zeros(b_pad, dtype=torch.int32, device=DEV)
    bt = torch.zeros((b_pad, width), dtype=torch.int32, device=DEV)
    slots = torch.full((b_pad,), -1, dtype=torch.int64, device=DEV)
    md = AttentionMetadata(
        num_tokens=b_pad,
        query_start_loc=qsl,
        seq_lens=seq_lens,
        block_table=bt,
        slot_mapping=slots,
        query_start_loc_cpu=list(range(b_real + 1)),
        query_lens_cpu=[1] * b_real,
        seq_lens_cpu=[],
        max_query_len=1,
        max_seq_len=max_len,
    )

    def fill(seed: int) -> list[int]:
        gen = torch.Generator(device=DEV).manual_seed(seed)
        lens = torch.randint(max_len // 40, max_len + 1, (b_real,), device=DEV, generator=gen)
        perm = torch.randperm(num_blocks, device=DEV, generator=gen)[: b_real * width]
        bt[:b_real].copy_(perm.view(b_real, width))
        seq_lens[:b_real].copy_(lens)
        pos = lens - 1
        slots[:b_real].copy_(bt[torch.arange(b_real, device=DEV), pos // BS].long() * BS + pos % BS)
        for x in (q, k, v):
            x.normal_(generator=gen)
        return lens.tolist()

    be = triton_backend(fp8, num_splits)
    fill(1)
    saved = cache.clone()
    replay, g_out = capture(lambda: be.forward(q, k, v, cache, md))
    cache.copy_(saved)  # undo the warm-up and capture-time writes
    del saved
    steps = []
    for seed in (2, 3):
        lens = fill(seed)
        ref_cache = cache.clone()
        kvw.write_kv_ref(ref_cache, k[:b_real], v[:b_real], slots[:b_real], s, s)
        replay()
        torch.cuda.synchronize()
        ref = pa.paged_attention_ref(
            q[:b_real].float(), ref_cache, [1] * b_real, lens, bt, SCALE, s, s
        )
        err = rel_err(g_out[:b_real], ref)[0]
        steps.append({"rel_err": err, "cache_equal": bool(torch.equal(cache, ref_cache))})
        del ref_cache
    ok = all(r["rel_err"] < REL_TOL and r["cache_equal"] for r in steps)
    t = bench(replay, True) * 1e3
    return {"num_splits": num_splits, "fp8": fp8, "steps": steps, "ok": ok, "t_replay_us": t}


def sweep(quick: bool, only: str | None = None) -> list[dict[str, Any]]:
    out = []
    shapes = [
        ("decode b1 ctx8192", [(8191, 1)]),
        ("decode b64 ctx2048", [(2047, 1)] * 64),
        ("decode b64 ctx8192", [(8191, 1)] * 64),
        ("decode b256 ctx2048", [(2047, 1)] * 256),
        ("prefill 2048", [(0, 2048)]),
        ("chunk 512 @ ctx 4096", [(4096, 512)]),
        ("prefill 13x600 + 64 decodes", ADMISSION_ROWS),
    ]
    # Mixed steps over fp8 caches (online serving's admission steps): the unified kernel
    # also at small row blocks, where its decode rows waste less of each tile's conversion.
    fp8_shapes = [
        ("mixed 1x512 chunk + 63 decodes fp8", MIXED_ROWS),
        ("prefill 13x600 + 64 decodes fp8", ADMISSION_ROWS),
    ]
    for name, rows in shapes + fp8_shapes:
        if only and not re.search(only, name):
            continue
        fp8 = name.endswith("fp8")
        try:
            q, k, v, cache, md = make_batch(rows, kvw.FP8_DTYPE if fp8 else DTYPE)
            if md.max_query_len == 1:
                maxsp = max(1, min(64, md.max_seq_len // 64))
                cfgs = [
                    pa.AttnConfig(16, tile, 4, st, sp)
                    for tile in (16, 32, 64)
                    for st in (2, 3)
                    for sp in (1, 2, 4, 8, 16, 32, 64)
                    if sp <= maxsp
                ]
            elif fp8:  # small row blocks and 2 warps too; 8 warps only from 64 rows
                cfgs = [
                    pa.AttnConfig(bm, tile, w, st)
                    for bm in (16, 32, 64, 128)
                    for tile in (32, 64)
                    for w in (2, 4, 8)
                    for st in (2, 3)
                    if w < 8 or bm >= 64
                ]
            else:  # session 9's smallest block won; smaller ones since session 44
                cfgs = [
                    pa.AttnConfig(bm, tile, w, st)
                    for bm in (32, 64, 128)
                    for tile in (16, 32, 64, 128)
                    for w in (2, 4, 8)
                    for st in (2, 3)
                    if (tile < 128 or bm == 64) and (w > 2 or bm <= 64) and (w < 8 or bm >= 64)
                ]
            times = []
            for cfg in cfgs:
                try:
                    fn = attn_call(q, cache, md, fp8, cfg, k=k, v=v)
                    times.append((bench(fn, True) * 1e3, cfg))
                except Exception as e:  # e.g. out of shared memory
                    print(f"  {name} {cfg}: {type(e).__name__}: {str(e)[:120]}")
            times.sort(key=lambda x: x[0])
            sms = pa.num_sms(q.device)
            heur = pa.select_config(
                HQ, HKV, D, len(rows), md.max_query_len, md.max_seq_len, sms, fp8=fp8
            )
            t_heur = next((t for t, c in times if c == heur), None)
            # Causal attention FLOPs (QK and PV) for the achieved rate.
            flops = sum(4 * HQ * D * (c * x + x * (x + 1) / 2) for c, x in rows)
            print(f"sweep {name}: heuristic {heur} -> {t_heur} ({flops / 1e9:.1f} GFLOP)")
            for t, c in times[:5]:
                print(f"    {t:9.1f} us  {flops / t / 1e6:6.1f} TFLOP/s  {c}")
            out.append({"shape": name, "heuristic": str(heur), "t_heuristic_us": t_heur,
                        "best": [(t, str(c)) for t, c in times[:5]]})  # fmt: skip
            del cache
            torch.cuda.empty_cache()
        except Exception:
            traceback.print_exc()
    return out


def cases(quick: bool) -> list[Case]:
    cs = []
    for b in (1, 64, 256):
        for ctx in (512, 2048, 8192):
            if quick and (b, ctx) not in ((1, 8192), (64, 2048), (256, 2048)):
                continue
            cs.append(Case(f"decode b{b} ctx{ctx}", [(ctx - 1, 1)] * b))
    # 80 sequences of 600-1999 tokens: the mid-batch grid (paged_decode.mid_grid) on an H200.
    cs.append(Case("decode b80 ctx600-2000", [(599 + i * 97 % 1400, 1) for i in range(80)]))
    cs.append(Case("decode b64 ctx2048 fp8", [(2047, 1)] * 64, kvw.FP8_DTYPE))
    cs.append(Case("decode b1 ctx8192 fp8", [(8191, 1)], kvw.FP8_DTYPE))
    # The Triton fp8 decode kernels, still the path off sm90 or with STRIXLM_ATTN_FP8_MMA=0.
    cs.append(Case("decode b64 ctx2048 fp8 triton", [(2047, 1)] * 64, kvw.FP8_DTYPE, False))
    cs.append(Case("decode b1 ctx8192 fp8 triton", [(8191, 1)], kvw.FP8_DTYPE, False))
    cs.append(Case("prefill 2048", [(0, 2048)]))
    cs.append(Case("prefill 4x512", [(0, 512)] * 4))
    cs.append(Case("chunk 512 @ ctx 1536", [(1536, 512)]))
    cs.append(Case("mixed 1x512 chunk + 63 decodes", MIXED_ROWS))
    # fp8 caches in the unified kernel's prefill / extend paths (mixed steps)
    cs.append(Case("chunk 512 @ ctx 1536 fp8", [(1536, 512)], kvw.FP8_DTYPE))
    cs.append(Case("mixed 1x512 chunk + 63 decodes fp8", MIXED_ROWS, kvw.FP8_DTYPE))
    return cs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweep", action="store_true")
    p.add_argument(
        "--sweep-only", default=None, help="sweep only the shapes whose name this regex finds"
    )
    p.add_argument(
        "--sweep-alone", action="store_true", help="with --sweep: skip the correctness checks"
    )
    p.add_argument("--quick", action="store_true", help="fewer cases, shorter timing")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    t0 = time.time()
    env = {
        "device": torch.cuda.get_device_name(),
        "sms": pa.num_sms(torch.device(DEV)),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }
    print(json.dumps(env))
    result: dict[str, Any] = {"env": env, "cases": [], "graphs": []}
    hdr = (
        f"{'case':34} {'rel_err':>8} {'torch':>8} {'attn us':>9} {'backend':>9} {'torch us':>9}"
        f" {'sdpa us':>8} {'x torch':>7} {'x sdpa':>7} {'TB/s':>5} {'%4.3':>5}  config"
    )
    print(hdr)
    failed = False
    checks = not (args.sweep and args.sweep_alone)
    for case in cases(args.quick) if checks else []:
        try:
            r = run_case(case, args.quick)
        except Exception as e:
            traceback.print_exc()
            r = {"case": case.name, "ok": False, "error": f"{type(e).__name__}: {e}"}
            print(f"{case.name:34} ERROR {r['error'][:200]}")
            result["cases"].append(r)
            failed = True
            torch.cuda.empty_cache()
            continue
        failed |= not r["ok"]
        result["cases"].append(r)

        def f(x, fmt):
            return format(x, fmt) if x is not None else "-"

        tt, ts = r.get("t_torch_us"), r.get("t_sdpa_us")
        print(
            f"{case.name:34} {r['rel_err']:8.1e} {f(r.get('torch_rel_err'), '8.1e'):>8}"
            f" {r['t_attn_us']:9.1f} {r['t_backend_us']:9.1f} {f(tt, '9.1f'):>9}"
            f" {f(ts, '8.1f'):>8}"
            f" {f(tt / r['t_backend_us'] if tt else None, '7.2f'):>7}"
            f" {f(ts / r['t_attn_us'] if ts else None, '7.2f'):>7}"
            f" {f(r.get('bw_tbs'), '5.2f'):>5} {f(r.get('bw_frac', None), '5.0%'):>5}"
            f"  {r['config']}{'' if r['ok'] else '  <-- FAIL'}"
        )
        torch.cuda.empty_cache()
    graph_cases = ((1, False), (8, False), (None, False), (None, True))
    for ns, fp8 in graph_cases if checks else ():
        try:
            g = graph_check(ns, fp8=fp8)
            print(f"cuda graph (num_splits={ns}{', fp8' if fp8 else ''}): {g}")
        except Exception as e:
            traceback.print_exc()
            g = {"num_splits": ns, "ok": False, "error": f"{type(e).__name__}: {e}"}
        failed |= not g["ok"]
        result["graphs"].append(g)
    if args.sweep:
        result["sweep"] = sweep(args.quick, args.sweep_only)
    result["ok"] = not failed
    result["elapsed_s"] = time.time() - t0
    print(f"{'ALL OK' if not failed else 'FAILURES'} in {result['elapsed_s']:.0f} s")
    path = args.json
    if path is None and os.environ.get("OUT"):
        path = os.path.join(os.environ["OUT"], "check_attention.json")
    if path:
        Path(path).write_text(json.dumps(result, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
