"""Attention in the standard workload's admission steps: one launch or two?

A budget-sized mixed step (prefill chunks beside the decodes of requests admitted earlier)
runs attention as one unified launch, configured for the long prefill (the mixed graph is
captured with max_query_len = the token bucket): its decode rows walk their contexts with
the prefill's 32-token tiles and 64-row MMA tiles. This times, per launch and in CUDA graphs
of 28 launches (one per layer, as in a step):
  one     the whole batch, decodes first (the scheduler's order), the mixed graph's config;
  pre     the prefill rows alone, same config;
  dec     the decode rows alone with the decode path's choice (persistent grid or split);
  one_fresh / pre_fresh  the same with the step's k / v given (step_kv): the unified kernel's
          programs on fresh prompts read them by TMA (prefill_attention.fresh_rows; its
          output is checked against the cache path first), with a sweep of its K/V tile;
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

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels import prefill_attention as pfa  # noqa: E402

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


def call(q, cache, md, max_query_len: int, max_seq_len: int, order=None, step_kv=None):
    return lambda: pa.paged_attention(
        q, cache, md.query_start_loc, md.seq_lens, md.block_table, SCALE,
        max_query_len=max_query_len, max_seq_len=max_seq_len, seq_order=order, step_kv=step_kv,
    )  # fmt: skip


def fresh_check(q, k, v, cache, md) -> float:
    """Relative error of the fresh path against the unified kernel alone (K/V written to the
    cache first, as the q/k launch does)."""
    kvw.write_kv(cache, k, v, md.slot_mapping)
    ref = call(q, cache, md, BUDGET, MAX_MODEL_LEN)()[: md.num_tokens].float()
    got = call(q, cache, md, BUDGET, MAX_MODEL_LEN, step_kv=(k, v))()[: md.num_tokens].float()
    return ((got - ref).norm() / ref.norm()).item()


def sweep_fresh(q, k, v, cache, md) -> list:
    """The whole batch with the fresh branch over its K/V tile (prefill_attention.BLOCK_N)."""
    rows = []
    for bn in (32, 64, 128):
        pfa.BLOCK_N = bn
        try:
            t = graph_time_us(call(q, cache, md, BUDGET, MAX_MODEL_LEN, step_kv=(k, v)))
        except Exception as e:
            print(f"    fresh block_n {bn}: {type(e).__name__}: {str(e)[:100]}")
            continue
        print(f"    fresh branch, block_n {bn}: {t:.1f} us", flush=True)
        rows.append({"block_n": bn, "us": t})
    pfa.BLOCK_N = 64
    return rows


def order_of(md) -> torch.Tensor:
    lens = torch.tensor(md.seq_lens_cpu)
    return torch.argsort(-lens, stable=True).to(torch.int32).cuda()


def main() -> None:
    pfa.ENABLED = True  # the fresh branch is opt-in in the engine; here it is measured
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = []
    for d in (0, 32, 64, 128, 192, 240):
        rows = mix(d, seed=d)
        dec = [r for r in rows if r[1] == 1]
        pre = [r for r in rows if r[1] > 1]
        res = {"decodes": d, "prefill_tokens": sum(x for _, x in pre), "prompts": len(pre)}
        q, k, v, cache, md = make_batch(rows, DTYPE, seed=1)
        res["fresh_rel_err"] = fresh_check(q, k, v, cache, md)
        res["one_us"] = graph_time_us(call(q, cache, md, BUDGET, MAX_MODEL_LEN))
        fresh = call(q, cache, md, BUDGET, MAX_MODEL_LEN, step_kv=(k, v))
        res["one_fresh_us"] = graph_time_us(fresh)
        if d in (0, 128):
            res["sweep"] = sweep_fresh(q, k, v, cache, md)
        del cache
        q, k, v, cache, md = make_batch(pre, DTYPE, seed=2)
        res["pre_us"] = graph_time_us(call(q, cache, md, BUDGET, MAX_MODEL_LEN))
        fresh = call(q, cache, md, BUDGET, MAX_MODEL_LEN, step_kv=(k, v))
        res["pre_fresh_us"] = graph_time_us(fresh)
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
            f" ({res.get('dec_mixedcfg_tbs', 0):.2f} TB/s vs {res.get('dec_tbs', 0):.2f})"
            f" | fresh path: one {res['one_fresh_us']:7.1f} us, pre {res['pre_fresh_us']:7.1f}"
            f" (rel err vs unified {res['fresh_rel_err']:.1e})",
            flush=True,
        )
        results.append(res)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
