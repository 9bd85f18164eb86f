"""GPU check of the Triton sampler against the torch reference Sampler.

Vocab 151936 (Qwen3), bf16 logits (randn * 2 with 16 boosted tokens per row: peaked rows,
like a model's), B = 1, 64, 256. First the kernel's Gumbel noise against
random.gumbel_noise bit for bit (same hash; libdevice logf vs torch.log). For each config:
sampled-token identity with the torch Sampler on the same CUDA logits, the filtered set
(the kernel's per-row threshold vs the reference's kept tokens), logprobs against the
reference; then median times
(triton.testing.do_bench) of both samplers and of the Triton sampler replayed from a CUDA
graph (which also checks that it captures and replays to the same tokens).

    python benchmarks/gpu/check_sampler.py [--batches 1,64,256] [--json PATH]

Prints a table; writes JSON to $OUT/check_sampler.json when OUT is set. One failing config
is recorded and the rest still run. Exit 1 if a check fails: any token mismatch, or (top-p
configs only, where float32 summation order may flip a boundary) more than 1% of rows
with a different filtered set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a plain checkout

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from strixlm.kernels import sampler as kern  # noqa: E402
from strixlm.sample.metadata import SamplingMetadata, SamplingRow  # noqa: E402
from strixlm.sample.penalties import apply_penalties, apply_suppress_tokens  # noqa: E402
from strixlm.sample.random import gumbel_noise  # noqa: E402
from strixlm.sample.sampler import Sampler, apply_top_k_top_p_min_p  # noqa: E402
from strixlm.sample.triton_sampler import TritonSampler  # noqa: E402

V = 151936
DEV = "cuda"


def _rows(n: int, **kw: Any) -> list[SamplingRow]:
    return [SamplingRow(seed=1000 + 7 * i, position=50 + i, **kw) for i in range(n)]


def _penalty_rows(n: int) -> list[SamplingRow]:
    g = torch.Generator().manual_seed(1)
    rows = []
    for i in range(n):
        hist = torch.randint(0, V, (512,), generator=g).tolist()
        hist += torch.randint(0, 64, (64,), generator=g).tolist()  # repeats
        rows.append(
            SamplingRow(
                temperature=0.8, top_p=0.95, repetition_penalty=1.2, frequency_penalty=0.3,
                presence_penalty=0.2, token_ids=hist, prompt_len=448, seed=i, position=576,
            )
        )  # fmt: skip
    return rows


def _mixed_rows(n: int) -> list[SamplingRow]:
    cfgs = [
        dict(temperature=0.0),
        dict(temperature=0.7, top_k=20),
        dict(temperature=1.0, top_p=0.9),
        dict(temperature=0.6, top_k=100, top_p=0.8, min_p=0.02),
        dict(temperature=1.2, min_p=0.1),
        dict(temperature=1.0),
    ]
    return [SamplingRow(seed=i, position=i, **cfgs[i % len(cfgs)]) for i in range(n)]


CONFIGS: dict[str, Callable[[int], list[SamplingRow]]] = {
    "greedy": lambda n: _rows(n, temperature=0.0),
    "plain T=0.8": lambda n: _rows(n, temperature=0.8),
    "top_k=50": lambda n: _rows(n, temperature=0.8, top_k=50),
    "top_p=0.9": lambda n: _rows(n, temperature=0.8, top_p=0.9),
    "min_p=0.05": lambda n: _rows(n, temperature=0.8, min_p=0.05),
    "k50 p0.9 minp0.05": lambda n: _rows(n, temperature=0.8, top_k=50, top_p=0.9, min_p=0.05),
    "top_p=0.95 flat T=3": lambda n: _rows(n, temperature=3.0, top_p=0.95),
    "penalties+top_p": _penalty_rows,
    "suppress": lambda n: _rows(n, temperature=1.0, suppress_token_ids=list(range(0, 64))),
    "logprobs=20 top_p": lambda n: _rows(n, temperature=0.8, top_p=0.9, num_logprobs=20),
    "mixed": _mixed_rows,
}


@triton.jit
def _noise_kernel(seed_ptr, pos_ptr, g_ptr, V, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    key = kern._row_key(tl.load(seed_ptr + row), tl.load(pos_ptr + row))
    tl.store(g_ptr + row * V + offs, kern._gumbel(key, offs, True), mask=offs < V)


def check_noise_bits(n: int = 64) -> dict[str, Any]:
    """The kernel's Gumbel noise vs random.gumbel_noise on CUDA: should be bit-identical."""
    seeds = torch.arange(n, device=DEV, dtype=torch.int64) * 7919 - 2**40
    pos = torch.arange(n, device=DEV, dtype=torch.int64) * 3 + 2**32 - 5
    ours = torch.empty(n, V, device=DEV)
    _noise_kernel[(n, triton.cdiv(V, 1024))](seeds, pos, ours, V, BLOCK=1024)
    ref = gumbel_noise(seeds, pos, V)
    diff = ours != ref
    return {
        "noise_elems": n * V,
        "noise_bits_differ": int(diff.sum()),
        "noise_max_abs_diff": float((ours - ref).abs().max()),
    }


def make_logits(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(n, V, device=DEV, generator=g) * 2
    idx = torch.randint(0, V, (n, 16), device=DEV, generator=g)
    boost = torch.rand(n, 16, device=DEV, generator=g) * 8 + 4
    x.scatter_add_(1, idx, boost)
    return x.to(torch.bfloat16)


def kept_sets(logits: torch.Tensor, md: SamplingMetadata, thr: torch.Tensor):
    """(reference kept, kernel kept) [B, V] bool for the non-greedy rows' filters."""
    x = apply_suppress_tokens(logits.float().clone(), md.suppress_token_ids)
    if not md.no_penalties:
        x = apply_penalties(x, md)
    greedy = md.temperature < 1e-5
    scaled = x / torch.where(greedy, 1.0, md.temperature)[:, None]
    finite = torch.isfinite(scaled)
    ref = torch.isfinite(apply_top_k_top_p_min_p(scaled, md.top_k, md.top_p, md.min_p))
    ref[greedy] = True
    return ref & finite, (scaled >= thr[:, None]) & finite


def check_one(name: str, n: int, seed: int) -> dict[str, Any]:
    rows = CONFIGS[name](n)
    logits = make_logits(n, seed)
    md = SamplingMetadata.build(rows, DEV, V)
    ref_s, ts = Sampler(), TritonSampler()
    out = ts(logits, md)  # eager first: compiles, allocates the stats buffer
    ref = ref_s(logits, md)
    torch.cuda.synchronize()
    tok_bad = int((out.sampled_token_ids != ref.sampled_token_ids).sum())
    r: dict[str, Any] = {"config": name, "B": n, "token_mismatch": tok_bad}
    if not md.no_top_k_top_p_min_p and ts.last_thresholds is not None:
        # With STRIXLM_SAMPLER_TOPP_REJECTION=1, top-p rows a draw settled have no cutoff
        # (NaN): their token is checked above, their set is not. The radix path's sets are
        # checked on every row, and both are timed.
        radix = TritonSampler(topp_rejection=False)
        tok_radix = radix(logits, md).sampled_token_ids
        r["token_mismatch_radix"] = int((tok_radix != ref.sampled_token_ids).sum())
        want, got = kept_sets(logits, md, radix.last_thresholds)
        r["set_mismatch_rows"] = int((want != got).any(-1).sum())
        r["kept_median"] = int(want.sum(-1).median())
        r["settled_by_rejection"] = int(torch.isnan(ts.last_thresholds).sum())
        if r["settled_by_rejection"]:
            r["triton_radix_ms"] = do_bench(lambda: radix(logits, md), return_mode="median")
    if out.logprobs is not None and ref.logprobs is not None:
        a, b = out.logprobs, ref.logprobs
        r["lp_max_err"] = float((a.sampled_logprobs - b.sampled_logprobs).abs().max())
        r["rank_mismatch"] = int((a.sampled_ranks != b.sampled_ranks).sum())
        r["top_lp_max_err"] = float((a.top_logprobs - b.top_logprobs).abs().max())
        # bf16 logits tie often; torch.topk orders ties arbitrarily, so compare by value.
        lp_at = torch.log_softmax(logits.float(), -1).gather(1, a.top_ids)
        r["top_ids_bad"] = int(((lp_at - b.top_logprobs).abs() > 1e-5).sum())
    r["triton_ms"] = do_bench(lambda: ts(logits, md), return_mode="median")
    r["torch_ms"] = do_bench(lambda: ref_s(logits, md), return_mode="median")
    r["speedup"] = r["torch_ms"] / r["triton_ms"]
    if not md.suppress_token_ids:  # suppress lists are host -> device copies: not capturable
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                ts(logits, md)  # warm on the side stream, as torch.cuda.graphs advises
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                g_out = ts(logits, md)
            graph.replay()
            torch.cuda.synchronize()
            r["graph_ok"] = bool(torch.equal(g_out.sampled_token_ids, out.sampled_token_ids))
            r["graph_ms"] = do_bench(graph.replay, return_mode="median")
        except Exception as e:  # recorded, not fatal
            r["graph_ok"] = False
            r["graph_error"] = f"{type(e).__name__}: {e}"[:300]
    return r


def failed(r: dict[str, Any]) -> bool:
    if "error" in r or r.get("graph_ok") is False:
        return True
    if r.get("rank_mismatch", 0) or r.get("top_ids_bad", 0) or r.get("lp_max_err", 0) > 1e-4:
        return True
    topp = "top_p" in r["config"] or r["config"] == "mixed"
    sets = r.get("set_mismatch_rows", 0)
    if topp:
        limit = max(1, r["B"] // 100)
        bad_tokens = max(r["token_mismatch"], r.get("token_mismatch_radix", 0))
        return sets > limit or bad_tokens > limit
    return sets > 0 or r["token_mismatch"] > 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="1,64,256")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--json", default=None)
    args = p.parse_args()
    env = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps(env))
    t0 = time.time()
    try:
        noise = check_noise_bits()
    except Exception as e:  # recorded, not fatal
        traceback.print_exc()
        noise = {"error": f"{type(e).__name__}: {e}"[:300]}
    print(json.dumps(noise))
    results = []
    for n in [int(b) for b in args.batches.split(",")]:
        for i, name in enumerate(args.configs.split(",")):
            try:
                r = check_one(name, n, seed=100 * n + i)
            except Exception as e:  # one failing config must not stop the rest
                traceback.print_exc()
                r = {"config": name, "B": n, "error": f"{type(e).__name__}: {e}"[:500]}
            r["failed"] = failed(r)
            results.append(r)
            print(json.dumps(r, default=str), flush=True)
    hdr = f"{'B':>4} {'config':<20} {'triton ms':>9} {'torch ms':>9} {'x':>6} {'graph ms':>9}"
    print("\n" + hdr + "  tok_bad set_bad  status")
    for r in results:
        if "error" in r:
            print(f"{r['B']:>4} {r['config']:<20} ERROR {r['error'][:80]}")
            continue
        g = r.get("graph_ms")
        print(
            f"{r['B']:>4} {r['config']:<20} {r['triton_ms']:>9.3f} {r['torch_ms']:>9.3f} "
            f"{r['speedup']:>6.1f} {'-' if g is None else f'{g:9.3f}':>9}  "
            f"{r['token_mismatch']:>7} {r.get('set_mismatch_rows', '-'):>7}  "
            f"{'FAIL' if r['failed'] else 'ok'}"
        )
    print(f"total {time.time() - t0:.0f}s")
    path = args.json
    if path is None and os.environ.get("OUT"):
        path = os.path.join(os.environ["OUT"], "check_sampler.json")
    if path:
        out = {"env": env, "noise": noise, "results": results}
        Path(path).write_text(json.dumps(out, indent=1, default=str))
    # Noise bits that differ (a logf mismatch) are reported, not fatal: tokens still decide.
    return 1 if any(r["failed"] for r in results) or "error" in noise else 0


if __name__ == "__main__":
    sys.exit(main())
