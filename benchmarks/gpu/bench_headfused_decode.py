"""Would decode attention stream faster reading whole KV blocks (all kv heads) per tile?

The persistent decode kernel (kernels/paged_decode.py) gives each (program, kv head) its own
walk: a 64-token tile of one head is 64 rows of 256 bytes, 2 KB apart in the cache
([blocks, block_size, Hkv, D]). It reads 4.13-4.19 TB/s on full tiles where a streaming read
reaches 4.32-4.45 (sessions 5-13), and a tile that holds 8 tokens costs 63% of a full one:
most of a tile's time is a fixed per-iteration cost, not its bytes. Head-major blocks (4 KB
runs per head) did not help (session 13), so contiguity alone is not the lever; bytes per
iteration may be.

Here one program takes a sequence's KV block for ALL kv heads per iteration: NB blocks of
block_size x Hkv rows, contiguous 32 KB each for K and for V at 16-token blocks (2-4x the
engine's bytes per iteration), against all Hq query heads at once. The score tile
[Hq, NB * block_size * Hkv] keeps a row's own kv head only (the rest is masked to -inf, so
P is zero there and P @ V sums that head's values alone): 7/8 of the MMA is wasted, which
a memory-bound loop can afford. The last tile of a sequence wastes at most NB * block_size - 1
tokens, against the engine's 63 (64-token tiles). Sequences are dealt in a snake over the
longest-first order as the engine deals them (no dynamic hand-out, no segments).

Timed against the engine's kernel (paged_attention) on the same caches, 28 launches per CUDA
graph, over programs per SM, warps, stages and NB; every variant is checked against the
engine's output first.

H200, 2026-12-02 (docs/benchmarks.md, session 17): slower than the engine's kernel at three of
four shapes (x0.58-0.875; the engine read 4.33 TB/s at b256 with mixed lengths), x1.04 at b256
with 520-token contexts; 4 blocks a tile do not fit shared memory. Not built into the engine.

python benchmarks/gpu/bench_headfused_decode.py [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels.paged_attention import LOG2E  # noqa: E402

HQ, HKV, D = 16, 8, 128
LAUNCHES = 28


@triton.jit
def _snake_deal(order_ptr, seq_lens_ptr, num_seqs, TOKENS: tl.constexpr,
                MAX_ITEMS: tl.constexpr):  # fmt: skip
    # Program p's sequences, dealt in a snake over the longest-first order, and their tile
    # ranges [firsts, ends) in the program's walk of TOKENS-token tiles (empty past the last).
    p = tl.program_id(0)
    n_prog = tl.num_programs(0)
    idx = tl.arange(0, MAX_ITEMS)
    rank = idx * n_prog + tl.where(idx % 2 == 0, p, n_prog - 1 - p)
    item_ok = rank < num_seqs
    seqs = tl.load(order_ptr + rank, mask=item_ok, other=0)
    lens = tl.load(seq_lens_ptr + seqs, mask=item_ok, other=0)
    tiles = tl.cdiv(lens, TOKENS)
    ends = tl.cumsum(tiles, axis=0)
    return idx, seqs, lens, ends, ends - tiles, tl.sum(tiles, axis=0)


@triton.jit
def _headfused_decode_kernel(
    out_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    bt_ptr,
    seq_lens_ptr,
    order_ptr,
    qk_scale,
    num_seqs,
    stride_qt,
    stride_ot,
    stride_bt,
    stride_cb,
    NUM_Q_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    NB: tl.constexpr,
    MAX_ITEMS: tl.constexpr,
):
    TOKENS: tl.constexpr = NB * BLOCK_SIZE  # per iteration
    ROWS: tl.constexpr = TOKENS * NUM_KV_HEADS
    G: tl.constexpr = NUM_Q_HEADS // NUM_KV_HEADS
    idx, seqs, lens, ends, firsts, total = _snake_deal(
        order_ptr, seq_lens_ptr, num_seqs, TOKENS, MAX_ITEMS
    )
    offs_h = tl.arange(0, NUM_Q_HEADS)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_r = tl.arange(0, ROWS)  # (block of the tile, token, kv head) of each K/V row
    r_blk = offs_r // (BLOCK_SIZE * NUM_KV_HEADS)
    r_in = offs_r % (BLOCK_SIZE * NUM_KV_HEADS)  # row within its block
    r_tok = r_blk * BLOCK_SIZE + r_in // NUM_KV_HEADS
    own = (offs_h // G)[:, None] == (r_in % NUM_KV_HEADS)[None, :]  # a q head's own kv head
    m_i = tl.full([NUM_Q_HEADS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([NUM_Q_HEADS], dtype=tl.float32)
    acc = tl.zeros([NUM_Q_HEADS, HEAD_DIM], dtype=tl.float32)
    for t in range(0, total):
        sel = idx == tl.sum((ends <= t).to(tl.int32), axis=0)
        seq = tl.sum(tl.where(sel, seqs, 0), axis=0)
        seq_len = tl.sum(tl.where(sel, lens, 0), axis=0)
        j = t - tl.sum(tl.where(sel, firsts, 0), axis=0)
        last = t == tl.sum(tl.where(sel, ends, 0), axis=0) - 1
        q = tl.load(q_ptr + seq.to(tl.int64) * stride_qt + offs_h[:, None] * HEAD_DIM
                    + offs_d[None, :])  # fmt: skip
        pos = j * TOKENS + r_tok
        ok = pos < seq_len
        blk = tl.load(bt_ptr + seq.to(tl.int64) * stride_bt + j * NB + r_blk, mask=ok, other=0)
        rows = blk.to(tl.int64) * stride_cb + r_in * HEAD_DIM
        k = tl.load(k_ptr + rows[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0)
        v = tl.load(v_ptr + rows[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(own & ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p_ = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p_, axis=1)
        acc = tl.dot(p_.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
        if last:
            o = out_ptr + seq.to(tl.int64) * stride_ot + offs_h[:, None] * HEAD_DIM
            tl.store(o + offs_d[None, :], (acc / l_i[:, None]).to(out_ptr.dtype.element_ty))
        acc = tl.where(last, 0.0, acc)
        m_i = tl.where(last, float("-inf"), m_i)
        l_i = tl.where(last, 0.0, l_i)


def headfused_decode(q, cache, seq_lens, bt, order, scale, *, nb, per_sm, warps, stages, sms):
    """Decode attention of q [B, Hq, D] (contiguous, one token per sequence) over the paged
    cache [2, blocks, block_size, Hkv, D] (contiguous), NB blocks of all heads per tile."""
    b, hq, d = q.shape
    _, _, bs, hkv, _ = cache.shape
    kc, vc = cache[0], cache[1]
    n_prog = max(1, min(b, sms * per_sm))
    max_items = max(2, triton.next_power_of_2(-(-b // n_prog)))
    out = torch.empty_like(q)
    _headfused_decode_kernel[(n_prog,)](
        out, q, kc, vc, bt, seq_lens, order, float(scale * LOG2E), b,
        q.stride(0), out.stride(0), bt.stride(0), kc.stride(0),
        NUM_Q_HEADS=hq, NUM_KV_HEADS=hkv, HEAD_DIM=d, BLOCK_SIZE=bs, NB=nb,
        MAX_ITEMS=max_items, num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out


def make_case(ctxs: list[int], bs: int, seed: int = 0, *, device: str = "cuda", hq: int = HQ,
              hkv: int = HKV, d: int = D, dtype: torch.dtype = torch.bfloat16):  # fmt: skip
    """q, a cache with shuffled blocks, block table, lengths and the longest-first order."""
    g = torch.Generator(device=device).manual_seed(seed)
    nblk = [-(-c // bs) for c in ctxs]
    num_blocks = sum(nblk) + 4
    perm = torch.randperm(num_blocks, device=device, generator=g).to(torch.int32)
    # Two spare columns: a tile of NB = 2 blocks may look one block past the last (masked).
    bt = torch.zeros((len(ctxs), max(nblk) + 2), dtype=torch.int32, device=device)
    off = 0
    for i, n in enumerate(nblk):
        bt[i, :n] = perm[off : off + n]
        off += n
    cache = torch.randn((2, num_blocks, bs, hkv, d), device=device, generator=g).to(dtype)
    q = torch.randn((len(ctxs), hq, d), device=device, generator=g).to(dtype)
    seq_lens = torch.tensor(ctxs, dtype=torch.int32, device=device)
    order = torch.argsort(seq_lens, descending=True, stable=True).to(torch.int32)
    return q, cache, seq_lens, bt, order


def checked_time(fn, ref: torch.Tensor, cfg: dict) -> float | None:
    """fn's per-launch graph time, or None (printed) when it cannot build or is wrong."""
    try:
        got = fn().float()
    except Exception as e:  # noqa: BLE001 - a config that cannot build
        print(f"    {cfg}: {type(e).__name__} {str(e)[:100]}")
        return None
    err = ((got - ref).abs().max() / ref.abs().max()).item()
    if err > 2e-2:
        print(f"    {cfg}: WRONG (rel err {err:.3g})")
        return None
    return graph_us(fn)


def engine_call(q, cache, seq_lens, bt, order, scale):
    qsl = torch.arange(q.shape[0] + 1, dtype=torch.int32, device="cuda")
    max_seq_len = int(seq_lens.max())  # read once here: a host read inside a capture fails
    return lambda: pa.paged_attention(
        q, cache, qsl, seq_lens, bt, scale, max_query_len=1, max_seq_len=max_seq_len,
        seq_order=order,
    )  # fmt: skip


def graph_us(fn) -> float:
    """Per-launch replay time of LAUNCHES launches in one CUDA graph."""
    from graph_timing import graph_time_us

    return graph_time_us(fn, reps=10, calls=LAUNCHES)


def shapes(quick: bool) -> list[tuple[str, list[int]]]:
    rng = random.Random(0)
    out = [
        ("b256 spread100-2000", [rng.randint(100, 2000) for _ in range(256)]),
        ("b256 ctx520", [520] * 256),
        ("b128 spread300-2000", [rng.randint(300, 2000) for _ in range(128)]),
        ("b192 spread200-2000", [rng.randint(200, 2000) for _ in range(192)]),
    ]
    return out[:2] if quick else out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--engine-only",
        action="store_true",
        help="time the engine's kernel only (e.g. under STRIXLM_ATTN_DECODE_TILE / _WARPS)",
    )
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    scale = D**-0.5
    rows = []
    for name, ctxs in shapes(args.quick):
        kv_bytes = sum(ctxs) * HKV * D * 2 * 2
        q, cache, sl, bt, order = make_case(ctxs, 16)
        eng_fn = engine_call(q, cache, sl, bt, order, scale)
        ref = eng_fn().float()
        eng = graph_us(eng_fn)
        line = {"shape": name, "engine_us": eng, "variants": []}
        print(f"{name}: engine {eng:7.1f} us ({kv_bytes / eng / 1e6:.2f} TB/s)", flush=True)
        best = (float("inf"), None)
        # Triton does not multi-buffer this loop's pointer loads (no cp.async at 2-3 stages,
        # compiled for sm90), so stages barely matter; NB = 4 is the engine's 64 tokens a
        # tile, for every head at once (one program per SM fits its shared memory).
        for nb in () if args.engine_only else (1, 2, 4):
            for per_sm in (1, 2, 3):
                for warps in (4, 8):
                    for stages in (1, 2):
                        cfg = dict(nb=nb, per_sm=per_sm, warps=warps, stages=stages)
                        fn = functools.partial(
                            headfused_decode, q, cache, sl, bt, order, scale, sms=sms, **cfg
                        )
                        t = checked_time(fn, ref, cfg)
                        if t is None:
                            continue
                        line["variants"].append({**cfg, "us": t})
                        best = min(best, (t, cfg), key=lambda r: r[0])
        rows.append(line)
        if args.engine_only:
            continue
        line["best_us"], line["best_cfg"] = best
        print(
            f"  head-fused best {best[0]:7.1f} us ({kv_bytes / best[0] / 1e6:.2f} TB/s) "
            f"{best[1]}: x{eng / best[0]:.3f} against the engine",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
