"""Would decode attention read the paged KV cache faster through TMA? An experiment for issue 3.

The persistent decode kernel (kernels/paged_decode.py) reads K/V at 4.1-4.3 TB/s at batch
128-256 where a plain streaming read reaches 4.3-4.45 (sessions 5-8), and a decode step at
batch 256 is ~70% attention. Its tiles are gathered with pointer loads: 64 token rows of
256 bytes each (one kv head), one address per row from the block table, so every tile costs
its warps dozens of load instructions and the address math. With a block as large as the
tile (TILE == block size), a tile of one head is one TMA box: [TILE tokens, D] at
(block * TILE, head * D) of the cache seen as [blocks * block_size, Hkv * D]: one
instruction per K or V tile, the copy asynchronous.

This times a simplified persistent kernel (sequences dealt in a snake over the longest-first
order, one query token each, no dynamic hand-out or segments) with the two load paths, over
programs per SM, warps and stages, against the engine's kernel (paged_attention) on the same
caches at 16- and TILE-token blocks. Compiled for sm90, neither load path is multi-buffered
by Triton's pipeliner in this loop (shared memory is the same at 2-4 stages): TMA's gain, if
any, is fewer instructions per tile and room for more programs per SM. 28 launches per CUDA
graph, as in a step; every variant is checked against the engine's output first.

python benchmarks/gpu/bench_tma_decode.py [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels.paged_attention import LOG2E  # noqa: E402

HQ, HKV, D = 16, 8, 128
LAUNCHES = 28


@triton.jit
def _tma_decode_kernel(
    out_ptr,
    q_ptr,
    k_desc,
    v_desc,
    k_ptr,
    v_ptr,
    bt_ptr,
    seq_lens_ptr,
    order_ptr,
    qk_scale,
    num_seqs,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_bt,
    stride_cb,
    stride_cs,
    stride_ch,
    G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    MAX_ITEMS: tl.constexpr,
    TMA: tl.constexpr,
):
    p = tl.program_id(0)
    n_prog = tl.num_programs(0)
    kv_head = tl.program_id(1)
    idx = tl.arange(0, MAX_ITEMS)
    rank = idx * n_prog + tl.where(idx % 2 == 0, p, n_prog - 1 - p)
    item_ok = rank < num_seqs
    seqs = tl.load(order_ptr + rank, mask=item_ok, other=0)
    lens = tl.load(seq_lens_ptr + seqs, mask=item_ok, other=0)
    tiles = tl.cdiv(lens, TILE)
    ends = tl.cumsum(tiles, axis=0)
    firsts = ends - tiles
    total = tl.sum(tiles, axis=0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_t = tl.arange(0, TILE)
    head = kv_head * G + offs_m % G
    row_ok = offs_m < G
    io_mask = row_ok[:, None]
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for t in range(0, total):
        sel = idx == tl.sum((ends <= t).to(tl.int32), axis=0)
        seq = tl.sum(tl.where(sel, seqs, 0), axis=0)
        seq_len = tl.sum(tl.where(sel, lens, 0), axis=0)
        j = t - tl.sum(tl.where(sel, firsts, 0), axis=0)
        last = t == tl.sum(tl.where(sel, ends, 0), axis=0) - 1
        q = tl.load(
            q_ptr + seq.to(tl.int64) * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
            mask=io_mask,
            other=0.0,
        )
        blk = tl.load(bt_ptr + seq.to(tl.int64) * stride_bt + j)  # one block per tile
        if TMA:
            row = blk * TILE
            k = k_desc.load([row, kv_head * HEAD_DIM])
            v = v_desc.load([row, kv_head * HEAD_DIM])
        else:
            rows = blk.to(tl.int64) * stride_cb + offs_t * stride_cs + kv_head * stride_ch
            k = tl.load(k_ptr + rows[:, None] + offs_d[None, :])
            v = tl.load(v_ptr + rows[:, None] + offs_d[None, :])
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where((j * TILE + offs_t)[None, :] < seq_len, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p_ = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p_, axis=1)
        acc = tl.dot(p_.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
        if last:
            res = acc / l_i[:, None]
            o = out_ptr + seq.to(tl.int64) * stride_ot + head[:, None] * stride_oh
            tl.store(o + offs_d[None, :], res.to(out_ptr.dtype.element_ty), mask=io_mask)
        acc = tl.where(last, 0.0, acc)
        m_i = tl.where(last, float("-inf"), m_i)
        l_i = tl.where(last, 0.0, l_i)


def tma_decode(q, cache, seq_lens, bt, order, scale, *, tma, per_sm, warps, stages, sms):
    """Decode attention of q [B, Hq, D] (one token per sequence) with the simplified grid."""
    b = q.shape[0]
    _, _, bs, hkv, d = cache.shape
    kc, vc = cache[0], cache[1]
    flat_k = kc.view(-1, hkv * d)
    flat_v = vc.view(-1, hkv * d)
    kd = TensorDescriptor.from_tensor(flat_k, [bs, d])
    vd = TensorDescriptor.from_tensor(flat_v, [bs, d])
    n_prog = max(1, min(b, sms * per_sm // hkv))
    max_items = max(2, triton.next_power_of_2(-(-b // n_prog)))
    out = torch.empty_like(q)
    _tma_decode_kernel[(n_prog, hkv)](
        out, q, kd, vd, kc, vc, bt, seq_lens, order, float(scale * LOG2E), b,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), bt.stride(0),
        kc.stride(0), kc.stride(1), kc.stride(2),
        G=q.shape[1] // hkv, HEAD_DIM=d, TILE=bs, BLOCK_M=16, MAX_ITEMS=max_items, TMA=tma,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out


def make_case(ctxs: list[int], bs: int, seed: int = 0):
    """q, a bf16 cache with shuffled blocks, block table, lengths and the longest-first order."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    nblk = [-(-c // bs) for c in ctxs]
    num_blocks = sum(nblk) + 4
    perm = torch.randperm(num_blocks, device="cuda", generator=g).to(torch.int32)
    bt = torch.zeros((len(ctxs), max(nblk)), dtype=torch.int32, device="cuda")
    off = 0
    for i, n in enumerate(nblk):
        bt[i, :n] = perm[off : off + n]
        off += n
    cache = torch.randn((2, num_blocks, bs, HKV, D), device="cuda", generator=g).to(torch.bfloat16)
    q = torch.randn((len(ctxs), HQ, D), device="cuda", generator=g).to(torch.bfloat16)
    seq_lens = torch.tensor(ctxs, dtype=torch.int32, device="cuda")
    order = torch.argsort(seq_lens, descending=True, stable=True).to(torch.int32)
    return q, cache, seq_lens, bt, order


def engine_call(q, cache, seq_lens, bt, order, scale):
    qsl = torch.arange(q.shape[0] + 1, dtype=torch.int32, device="cuda")
    max_seq_len = int(seq_lens.max())  # read once here: a host read inside a capture fails
    return lambda: pa.paged_attention(
        q, cache, qsl, seq_lens, bt, scale, max_query_len=1, max_seq_len=max_seq_len,
        seq_order=order,
    )  # fmt: skip


def graph_us(fn) -> float:
    """Per-launch replay time of LAUNCHES launches in one CUDA graph (median of 3 x 10)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from graph_timing import graph_time_us

    return graph_time_us(lambda: [fn() for _ in range(LAUNCHES)], 10) / LAUNCHES


def shapes(quick: bool) -> list[tuple[str, list[int]]]:
    rng = random.Random(0)
    out = [
        ("b256 spread100-2000", [rng.randint(100, 2000) for _ in range(256)]),
        ("b256 ctx512", [512] * 256),
        ("b192 spread200-2000", [rng.randint(200, 2000) for _ in range(192)]),
        ("b128 spread300-2000", [rng.randint(300, 2000) for _ in range(128)]),
    ]
    return out[:2] if quick else out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    scale = D**-0.5
    rows = []
    for name, ctxs in shapes(args.quick):
        kv_bytes = sum(ctxs) * HKV * D * 2 * 2
        q16, c16, sl16, bt16, o16 = make_case(ctxs, 16)
        eng16 = graph_us(engine_call(q16, c16, sl16, bt16, o16, scale))
        line = {"shape": name, "engine_bs16_us": eng16}
        print(
            f"{name}: engine, 16-token blocks {eng16:7.1f} us ({kv_bytes / eng16 / 1e6:.2f} TB/s)"
        )
        for bs in (64, 32):
            q, cache, sl, bt, order = make_case(ctxs, bs)
            eng_fn = engine_call(q, cache, sl, bt, order, scale)
            ref = eng_fn().float()
            eng = graph_us(eng_fn)
            line[f"engine_bs{bs}_us"] = eng
            print(f"  engine, {bs}-token blocks {eng:7.1f} us ({kv_bytes / eng / 1e6:.2f} TB/s)")
            for use_tma in (True, False):
                best = (float("inf"), None)
                for per_sm in (2, 3, 4, 6):
                    for warps in (2, 4):
                        for stages in (2, 3, 4):
                            cfg = dict(tma=use_tma, per_sm=per_sm, warps=warps, stages=stages)
                            try:
                                got = tma_decode(q, cache, sl, bt, order, scale, sms=sms, **cfg)
                            except Exception as e:  # noqa: BLE001 - a config that cannot build
                                print(f"    {bs} {cfg}: {type(e).__name__} {str(e)[:100]}")
                                continue
                            err = ((got.float() - ref).abs().max() / ref.abs().max()).item()
                            if err > 2e-2:
                                print(f"    {bs} {cfg}: WRONG (rel err {err:.3g})")
                                continue
                            t = graph_us(
                                lambda c=cfg, q=q, cache=cache, sl=sl, bt=bt, o=order: tma_decode(
                                    q, cache, sl, bt, o, scale, sms=sms, **c
                                )
                            )
                            best = min(best, (t, cfg), key=lambda r: r[0])
                tag = "TMA" if use_tma else "pointer"
                print(f"  simplified, {tag:7s} {bs}-token tiles {best[0]:7.1f} us "
                      f"({kv_bytes / best[0] / 1e6:.2f} TB/s) {best[1]}")  # fmt: skip
                line[f"{tag}_bs{bs}_us"] = best[0]
                line[f"{tag}_bs{bs}_cfg"] = best[1]
        rows.append(line)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
