"""Attention in the standard workload's admission steps: one launch or two?

A budget-sized mixed step (prefill chunks beside the decodes of requests admitted earlier)
runs attention as one unified launch, configured for the long prefill (the mixed graph is
captured with max_query_len = the token bucket): its decode rows walk their contexts with
the prefill's 32-token tiles and 64-row MMA tiles. This times, per launch and in CUDA graphs
of 28 launches (one per layer, as in a step):
  one     the whole batch, decodes first (the scheduler's order), the mixed graph's config;
  pre     the prefill rows alone, same config;
  dec     the decode rows alone with the decode path's choice (persistent grid or split);
and prints one against pre + dec. Shapes follow the workload's admission: D decodes with
contexts of 100-1100 tokens beside prompts of 100-1024 tokens filling the 8192-token budget.

    python benchmarks/gpu/bench_mixed_attn.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import graph_timing  # noqa: E402
import torch  # noqa: E402
from check_attention import DTYPE, SCALE, make_batch  # noqa: E402

from strixlm.kernels import paged_attention as pa  # noqa: E402

BUDGET = 8192
LAYERS = 28
MAX_MODEL_LEN = 4096


def mix(num_decodes: int, seed: int) -> list[tuple[int, int]]:
    """(context, query) rows: decodes first, then prompts filling the budget (the last one
    a chunk)."""
    rng = random.Random(seed)
    rows = [(rng.randint(100, 1100), 1) for _ in range(num_decodes)]
    left = BUDGET - num_decodes
    while left > 0:
        n = min(rng.randint(100, 1024), left)
        rows.append((0, n))
        left -= n
    return rows


def graph_time_us(fn) -> float:
    """Per call, from a CUDA graph of LAYERS calls (graph_timing.graph_time_us)."""
    return graph_timing.graph_time_us(fn, reps=20, calls=LAYERS)


def call(q, cache, md, max_query_len: int, max_seq_len: int, order=None):
    return lambda: pa.paged_attention(
        q, cache, md.query_start_loc, md.seq_lens, md.block_table, SCALE,
        max_query_len=max_query_len, max_seq_len=max_seq_len, seq_order=order,
    )  # fmt: skip


def order_of(md) -> torch.Tensor:
    lens = torch.tensor(md.seq_lens_cpu)
    return torch.argsort(-lens, stable=True).to(torch.int32).cuda()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = []
    for d in (0, 32, 64, 128, 192, 240):
        rows = mix(d, seed=d)
        dec = [r for r in rows if r[1] == 1]
        pre = [r for r in rows if r[1] > 1]
        res = {"decodes": d, "prefill_tokens": sum(x for _, x in pre), "prompts": len(pre)}
        q, _, _, cache, md = make_batch(rows, DTYPE, seed=1)
        res["one_us"] = graph_time_us(call(q, cache, md, BUDGET, MAX_MODEL_LEN))
        del cache
        q, _, _, cache, md = make_batch(pre, DTYPE, seed=2)
        res["pre_us"] = graph_time_us(call(q, cache, md, BUDGET, MAX_MODEL_LEN))
        del cache
        res["dec_us"] = 0.0
        if dec:
            q, _, _, cache, md = make_batch(dec, DTYPE, seed=3)
            res["dec_us"] = graph_time_us(call(q, cache, md, 1, MAX_MODEL_LEN, order_of(md)))
            # The decode rows through the mixed graph's config, alone.
            res["dec_mixedcfg_us"] = graph_time_us(call(q, cache, md, BUDGET, MAX_MODEL_LEN))
            kv = sum(md.seq_lens_cpu) * 8 * 128 * 2 * cache.element_size()
            res["dec_tbs"] = kv / (res["dec_us"] * 1e-6) / 1e12
            res["dec_mixedcfg_tbs"] = kv / (res["dec_mixedcfg_us"] * 1e-6) / 1e12
            del cache
        torch.cuda.empty_cache()
        two = res["pre_us"] + res["dec_us"]
        print(
            f"decodes {d:3d} + {res['prefill_tokens']} prefill tokens ({res['prompts']} prompts):"
            f" one {res['one_us']:7.1f} us | pre {res['pre_us']:7.1f} + dec {res['dec_us']:6.1f}"
            f" = {two:7.1f} (x{res['one_us'] / two:.3f}) | decodes alone with the mixed"
            f" config {res.get('dec_mixedcfg_us', 0):6.1f} us"
            f" ({res.get('dec_mixedcfg_tbs', 0):.2f} TB/s vs {res.get('dec_tbs', 0):.2f})",
            flush=True,
        )
        results.append(res)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
