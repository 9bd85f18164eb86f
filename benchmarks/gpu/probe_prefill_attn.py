"""How far the paged prefill attention is from a FlashAttention peer at the admission shape.

The standard workload's 18 admission steps each attend ~13 fresh ~600-token prompts (plus the
decodes of requests already admitted). Our unified Triton kernel runs the prompts alone at
~189 TFLOP/s on the H200 (session 28); this probe times, in the same process on the same
prompts:

- ours: `paged_attention` at the engine's heuristic config, over the paged cache, on the mixed
  batch (the decodes first, as the scheduler puts them), on the decodes alone and on the
  prompts alone;
- the decodes (their own launch) on a second stream beside the prompts, at three stream
  priority / launch-order settings;
- the peer: torch's `varlen_attn` (FlashAttention behind torch.nn.attention.varlen) on the
  same prompts with K/V contiguous (a fresh prompt's K/V are, before the cache write), and
  paged through the block table where this torch build takes 16-token pages.

Outputs are checked against each other before timing. The ratio bounds what a faster prefill
kernel could save: (ours - peer) x 28 layers x 18 steps.

    python benchmarks/gpu/probe_prefill_attn.py [--prompts 13] [--prompt-len 600]
        [--decodes 64 192] [--json PATH]
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from check_attention import BS, HKV, HQ, SCALE, D, attn_call, bench, make_batch  # noqa: E402

from strixlm.kernels import paged_attention as pa  # noqa: E402

LAYERS, STEPS = 28, 18


def flops(rows: list[tuple[int, int]]) -> float:
    """Causal attention FLOPs (QK and PV) over (context, query length) rows."""
    return sum(4 * HQ * D * (c * x + x * (x + 1) / 2) for c, x in rows)


def time_rows(rows: list[tuple[int, int]], label: str, res: dict, sms: int):
    """Our kernel on one batch at the engine's config; returns (q, cache, md) for the peer."""
    q, _, _, cache, md = make_batch(rows, torch.bfloat16)
    cfg = pa.select_config(HQ, HKV, D, len(rows), md.max_query_len, md.max_seq_len, sms)
    t = bench(attn_call(q, cache, md, False), True) * 1e3
    res[f"ours_{label}_us"] = t
    print(f"ours {label:24s} {t:8.1f} us  {flops(rows) / t / 1e6:6.1f} TFLOP/s  {cfg}", flush=True)
    return q, cache, md


def two_streams(decodes, prompts, label: str, res: dict) -> None:
    """The decodes (their own launch, the decode grid) on a side stream beside the prompts
    on the main one: does a second launch overlap the memory-bound decodes with the
    prompts' tiles where one mixed grid does not?"""
    qd, _, _, cd, mdd = make_batch(decodes, torch.bfloat16)
    qp, _, _, cp, mdp = make_batch(prompts, torch.bfloat16, seed=1)
    dec, pre = attn_call(qd, cd, mdd, False), attn_call(qp, cp, mdp, False)
    for name, prio, dec_first in (("hi_dec_first", -1, True), ("hi_pre_first", -1, False),
                                  ("lo_dec_first", 0, True)):  # fmt: skip
        side = torch.cuda.Stream(priority=prio)

        def both(side=side, dec_first=dec_first):
            main = torch.cuda.current_stream()
            side.wait_stream(main)  # before either launch, so the two can overlap
            if not dec_first:
                pre()
            with torch.cuda.stream(side):
                dec()
            if dec_first:
                pre()
            main.wait_stream(side)

        t = bench(both, True) * 1e3
        res[f"streams_{label}_{name}_us"] = t
        print(f"two streams {label} {name:14s} {t:8.1f} us", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=13)
    ap.add_argument("--prompt-len", type=int, default=600)
    ap.add_argument("--decodes", type=int, nargs="*", default=[64, 192])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    prompts = [(0, args.prompt_len)] * args.prompts
    res: dict = {"prompts": args.prompts, "prompt_len": args.prompt_len}
    sms = pa.num_sms(torch.device("cuda"))
    # The scheduler puts running decodes first in a batch.
    for nd in args.decodes:
        decodes = [(700, 1)] * nd
        time_rows(decodes + prompts, f"{nd}_decodes_mixed", res, sms)
        time_rows(decodes, f"{nd}_decodes_alone", res, sms)
        two_streams(decodes, prompts, f"{nd}_decodes", res)
    q, cache, md = time_rows(prompts, "prompts", res, sms)
    # The prompts alone (the loop's last batch): contiguous K/V, what the cache holds for
    # them, for the peer.
    n = args.prompts * args.prompt_len
    out = attn_call(q, cache, md, False)()[:n]
    bt = md.block_table
    blocks = -(-args.prompt_len // BS)
    kc, vc = (
        torch.cat(
            [part[bt[i, :blocks]].flatten(0, 1)[: args.prompt_len] for i in range(args.prompts)]
        )
        for part in cache
    )
    cu = md.query_start_loc[: args.prompts + 1].contiguous()
    qq = q[:n]
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError as e:
        print(f"peer: no torch.nn.attention.varlen in torch {torch.__version__} ({e})")
        varlen_attn = None
    if varlen_attn is not None:
        L = args.prompt_len  # noqa: N806
        params = inspect.signature(varlen_attn).parameters
        gqa = "enable_gqa" in params
        if not gqa:  # older torch: K/V repeated to the query heads (one more copy, untimed)
            kc, vc = (x.repeat_interleave(HQ // HKV, dim=1) for x in (kc, vc))
        extra: dict = dict(enable_gqa=True) if gqa else {}
        # Causal: window_size (-1, 0), or is_causal in builds before window_size.
        if "window_size" in params:
            extra["window_size"] = (-1, 0)
        else:
            extra["is_causal"] = True
        print(f"peer: torch {torch.__version__} varlen_attn({', '.join(params)})")

        def contiguous():
            return varlen_attn(qq, kc, vc, cu, cu, L, L, scale=SCALE, **extra)

        def paged():
            return varlen_attn(qq, cache[0], cache[1], cu, None, L, L, scale=SCALE,
                               seqused_k=md.seq_lens[: args.prompts],
                               block_table=bt[: args.prompts], **extra)  # fmt: skip

        for label, fn in (("contiguous", contiguous), ("paged16", paged)):
            try:
                got = fn()
                err = ((got.float() - out.float()).norm() / out.float().norm()).item()
                t = bench(fn, True) * 1e3
            except Exception as e:  # noqa: BLE001 - a build without the feature
                print(f"peer {label}: {type(e).__name__}: {str(e)[:160]}")
                continue
            res[f"peer_{label}_us"] = t
            res[f"peer_{label}_rel_err"] = err
            tf = flops(prompts) / t / 1e6
            print(f"peer {label:10s} {t:8.1f} us  {tf:6.1f} TFLOP/s  rel err vs ours {err:.2e}")
        if "peer_contiguous_us" in res:
            ours, peer = res["ours_prompts_us"], res["peer_contiguous_us"]
            saved = (ours - peer) * LAYERS * STEPS / 1e3
            print(f"ours / peer on the prompts: x{ours / peer:.2f}; over {LAYERS} layers x "
                  f"{STEPS} steps: {saved:.1f} ms")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
