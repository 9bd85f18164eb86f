"""Would decode attention read faster with 2 or 4 kv heads a program?

bench_read_pattern.py (H200, session 30) put the attention's access pattern, one kv head's
256-byte rows of randomly drawn 16-token blocks, K and V, at 4.32-4.39 TB/s, against
4.44-4.51 for whole 32 KB blocks. The engine's kernels give each program one kv head. Here
a program reads GROUP adjacent kv heads' rows of each token (512 B / 1 KB runs at GROUP 2 /
4), against their G * GROUP query heads at once. The score tile [BLOCK_M, tokens * GROUP]
keeps each query row's own kv head only (the rest is masked to -inf, so P is zero there):
(GROUP - 1) / GROUP of the MMA is wasted, which a memory-bound loop can afford. A tile's
item lookup is shared by its GROUP heads.

Unlike session 17's all-heads probe (bench_headfused_decode.py), each program loads its
next tile's block ids one iteration ahead, so Triton double-buffers K / V by cp.async as
the engine's kernels do since session 29. Sequences are dealt in a snake over the
longest-first order (no dynamic hand-out, no segments). GROUP = 1 is the same loop with one
head a program, so the GROUP rows against it isolate the heads-a-program effect, and the
engine's kernel is timed on the same caches as the reference. 28 launches a CUDA graph;
every variant is checked against the engine's output first.

python benchmarks/gpu/bench_headgroup_decode.py [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench_headfused_decode import _snake_deal  # noqa: E402

from strixlm.kernels.paged_attention import LOG2E  # noqa: E402


@triton.jit
def _headgroup_decode_kernel(
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
    NUM_KV_HEADS: tl.constexpr,
    G: tl.constexpr,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    NB: tl.constexpr,
    MAX_ITEMS: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    hg = tl.program_id(1)  # kv heads hg * GROUP .. hg * GROUP + GROUP - 1
    TOKENS: tl.constexpr = NB * BLOCK_SIZE  # a tile's tokens
    ROWS: tl.constexpr = TOKENS * GROUP  # K / V rows of a tile: (token, head of the group)
    idx, seqs, lens, ends, firsts, total = _snake_deal(
        order_ptr, seq_lens_ptr, num_seqs, TOKENS, MAX_ITEMS
    )
    offs_m = tl.arange(0, BLOCK_M)  # query row m: the group's query head m (m < G * GROUP)
    m_ok = offs_m < G * GROUP
    q_head = hg * (GROUP * G) + offs_m
    offs_d = tl.arange(0, HEAD_DIM)
    offs_r = tl.arange(0, ROWS)
    r_tok = offs_r // GROUP
    r_head = offs_r % GROUP
    col = (hg * GROUP + r_head) * HEAD_DIM  # the row's kv head within a token's heads
    own = (offs_m // G)[:, None] == r_head[None, :]
    # The first tile's item and block ids; each iteration then loads the next tile's.
    sel = idx == tl.sum((ends <= 0).to(tl.int32), axis=0)
    seq = tl.sum(tl.where(sel, seqs, 0), axis=0)
    seq_len = tl.sum(tl.where(sel, lens, 0), axis=0)
    first = tl.sum(tl.where(sel, firsts, 0), axis=0)
    end = tl.sum(tl.where(sel, ends, 0), axis=0)
    blk = tl.load(
        bt_ptr + seq.to(tl.int64) * stride_bt + r_tok // BLOCK_SIZE,
        mask=r_tok < seq_len,
        other=0,
    )
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for t in range(0, total):
        # The next tile's item and block ids, a tile ahead, so the K / V loads below depend
        # only on values of the previous iteration and can be issued stages ahead.
        sel_n = idx == tl.sum((ends <= t + 1).to(tl.int32), axis=0)
        seq_n = tl.sum(tl.where(sel_n, seqs, 0), axis=0)
        len_n = tl.sum(tl.where(sel_n, lens, 0), axis=0)
        first_n = tl.sum(tl.where(sel_n, firsts, 0), axis=0)
        end_n = tl.sum(tl.where(sel_n, ends, 0), axis=0)
        pos_n = (t + 1 - first_n) * TOKENS + r_tok
        blk_n = tl.load(
            bt_ptr + seq_n.to(tl.int64) * stride_bt + pos_n // BLOCK_SIZE,
            mask=pos_n < len_n,
            other=0,
        )
        pos = (t - first) * TOKENS + r_tok
        ok = pos < seq_len
        rows = blk.to(tl.int64) * stride_cb + (pos % BLOCK_SIZE) * (NUM_KV_HEADS * HEAD_DIM) + col
        k = tl.load(k_ptr + rows[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0)
        v = tl.load(v_ptr + rows[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0)
        q = tl.load(
            q_ptr + seq.to(tl.int64) * stride_qt + q_head[:, None] * HEAD_DIM + offs_d[None, :],
            mask=m_ok[:, None],
            other=0.0,
        )
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(own & ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # padded rows see no key
        p_ = tl.exp2(s - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p_, axis=1)
        acc = tl.dot(p_.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
        last = t == end - 1
        if last:
            o = out_ptr + seq.to(tl.int64) * stride_ot + q_head[:, None] * HEAD_DIM
            res = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
            tl.store(o + offs_d[None, :], res.to(out_ptr.dtype.element_ty), mask=m_ok[:, None])
        acc = tl.where(last, 0.0, acc)
        m_i = tl.where(last, float("-inf"), m_i)
        l_i = tl.where(last, 0.0, l_i)
        seq, seq_len, first, end, blk = seq_n, len_n, first_n, end_n, blk_n


def headgroup_decode(q, cache, seq_lens, bt, order, scale, *, group, nb, per_sm, warps,
                     stages, sms):  # fmt: skip
    """Decode attention of q [B, Hq, D] (contiguous, one token a sequence) over the paged
    cache [2, blocks, block_size, Hkv, D] (contiguous), GROUP kv heads a program and NB
    blocks a tile; about per_sm programs an SM in all."""
    b, hq, d = q.shape
    _, _, bs, hkv, _ = cache.shape
    assert hkv % group == 0 and hq % hkv == 0
    kc, vc = cache[0], cache[1]
    n_prog = max(1, min(b, sms * per_sm * group // hkv))
    max_items = max(2, triton.next_power_of_2(-(-b // n_prog)))
    g = hq // hkv
    out = torch.empty_like(q)
    _headgroup_decode_kernel[(n_prog, hkv // group)](
        out, q, kc, vc, bt, seq_lens, order, float(scale * LOG2E), b,
        q.stride(0), out.stride(0), bt.stride(0), kc.stride(0),
        NUM_KV_HEADS=hkv, G=g, GROUP=group, HEAD_DIM=d, BLOCK_SIZE=bs, NB=nb,
        MAX_ITEMS=max_items, BLOCK_M=max(16, triton.next_power_of_2(g * group)),
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out


def main() -> int:
    from bench_headfused_decode import D, checked_time, engine_call, graph_us, make_case, shapes

    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="two shapes, GROUP 1 / 2 / 4")
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    scale = D**-0.5
    rows = []
    for name, ctxs in shapes(args.quick):
        kv_bytes = sum(ctxs) * 8 * D * 2 * 2
        q, cache, sl, bt, order = make_case(ctxs, 16)
        eng_fn = engine_call(q, cache, sl, bt, order, scale)
        ref = eng_fn().float()
        eng = graph_us(eng_fn)
        line = {"shape": name, "engine_us": eng, "variants": []}
        print(f"{name}: engine {eng:7.1f} us ({kv_bytes / eng / 1e6:.2f} TB/s)", flush=True)
        for group in (1, 2, 4) if args.quick else (1, 2, 4, 8):
            best = (float("inf"), None)
            for nb in (1, 2):
                for per_sm in (2, 3, 4):
                    for warps in (2, 4):
                        cfg = dict(group=group, nb=nb, per_sm=per_sm, warps=warps, stages=3)
                        fn = functools.partial(
                            headgroup_decode, q, cache, sl, bt, order, scale, sms=sms, **cfg
                        )
                        t = checked_time(fn, ref, cfg)
                        if t is None:
                            continue
                        line["variants"].append({**cfg, "us": t})
                        best = min(best, (t, cfg), key=lambda r: r[0])
            print(
                f"  GROUP {group} best {best[0]:7.1f} us ({kv_bytes / best[0] / 1e6:.2f} TB/s)"
                f" {best[1]}: x{eng / best[0]:.3f} against the engine",
                flush=True,
            )
        rows.append(line)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
