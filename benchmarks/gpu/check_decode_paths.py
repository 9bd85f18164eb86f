"""The decode-path variants at the Qwen3-0.6B shape in bf16, against each other: the kernels
that only take that shape and dtype (splitk_linear's dense table, the TMA GEMM's table, the
fused gate_up + SiLU, the GEMV's row limit) never run in check_e2e.py, whose tiny fp32
models match none of their tables.

A Qwen3 model with the bundled qwen3-0.6b config and weights drawn N(0, 0.1) (norms at 1) is
saved once; each variant runs in its own process (the switches are read at import) over 200
greedy requests whose prompt lengths (20-600) and output lengths (4-64) vary, so the decode
batch shrinks through every row count the tables cover. Each token comes with its top-5
logprobs.

Variants round differently (another GEMM kernel sums K in another order; eager steps have
other row counts than the padded graphs), so a random 28-layer model's greedy tokens can
part where two candidates are nearly tied. Per variant, against the reference (session 10's
dispatch: cuBLAS and the GEMV to 8 rows):
  noise      max |logprob difference| of the chosen token over the positions where both
             runs have generated the same tokens so far (same context, same token)
  parted     sequences whose tokens differ, and at the first differing position the
             reference's top-1 / top-2 gap g_ref and the variant's g_var between its own
             choice and the reference's (from its top-K logprobs, K = TOP_K)
  swing      g_ref + g_var: how far the difference of the two candidates' logits moved
             between the runs. Each logit carries the variant's rounding, at most the noise
             either way, so a swing up to twice the noise is rounding; a divergence is
             explained when the variant's top-K holds the reference's token and the swing
             is at most 2 x noise (a reference token that fell out of the variant's top-K
             is never explained)
A variant passes when every divergence is explained. (Sessions 10-33 explained a divergence
when g_ref alone was at most the noise; the eager path's 0.25 gaps against a noise of
0.24-0.28 then passed or failed with the noise sample.) block64 (64-token KV blocks) must equal
the defaults token for token: the block size changes only where K/V live.

Requests that ask for logprobs are sampled eagerly; the greedy sampling graph's LM head with
an argmax epilogue (kernels/lm_head_argmax.py) runs only without them. tokens_fused and
tokens_unfused (STRIXLM_FUSED_GREEDY=0) ask for none: both are compared with the defaults,
whose top-2 gap at the first differing position says whether the largest noise above
explains the divergence.

python benchmarks/gpu/check_decode_paths.py   (JSON to $OUT/check_decode_paths.json if set;
CHECK_VARIANTS=defaults,tokens_fused runs only those, with the reference)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VARIANTS = {  # name -> environment; the first is the reference (session 10's dispatch)
    "cublas_gemv8": dict(
        STRIXLM_GEMV_MAX_ROWS="8",
        STRIXLM_DENSE_GEMM="0",
        STRIXLM_FUSE_GATE_UP_SILU="0",
        STRIXLM_TMA_GEMM="0",
        STRIXLM_PREFILL_GATE_UP_SILU_ROWS="0",  # session 16: the prefill epilogue off too
    ),
    "defaults": {},
    "eager_defaults": dict(STRIXLM_CHECK_EAGER="1"),
    "block64": dict(STRIXLM_CHECK_BLOCK_SIZE="64"),
    "tokens_fused": dict(STRIXLM_CHECK_NO_LOGPROBS="1"),
    "tokens_unfused": dict(STRIXLM_CHECK_NO_LOGPROBS="1", STRIXLM_FUSED_GREEDY="0"),
}
TOKENS_ONLY = ("tokens_fused", "tokens_unfused")
TOP_K = 5  # logprobs per position: where the variant ranks the reference's token


def save_model(folder: str) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg_path = os.path.join(ROOT, "strixlm", "benchmarks", "configs", "qwen3-0.6b", "config.json")
    cfg = Qwen3Config.from_pretrained(os.path.dirname(cfg_path))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.normal_(0, 0.1)
    model.save_pretrained(folder)


def run_variant(folder: str, out_path: str) -> None:
    import torch

    sys.path.insert(0, ROOT)
    from strixlm.engine.request import SamplingParams
    from strixlm.entrypoints.llm import LLM

    g = torch.Generator().manual_seed(1)
    n = 200
    lens = torch.randint(20, 600, (n,), generator=g).tolist()
    outs = torch.randint(4, 64, (n,), generator=g).tolist()
    prompts = [torch.randint(0, 150_000, (k,), generator=g).tolist() for k in lens]
    llm = LLM(
        folder,
        device="cuda",
        dtype="bfloat16",
        skip_tokenizer_init=True,
        enforce_eager=os.environ.get("STRIXLM_CHECK_EAGER") == "1",
        block_size=int(os.environ.get("STRIXLM_CHECK_BLOCK_SIZE", "16")),
        max_num_seqs=256,
        gpu_memory_utilization=0.5,
    )
    tokens_only = os.environ.get("STRIXLM_CHECK_NO_LOGPROBS") == "1"
    params = [
        SamplingParams(
            temperature=0, max_tokens=m, ignore_eos=True, logprobs=None if tokens_only else TOP_K
        )
        for m in outs
    ]
    got = llm.generate(prompts, params, use_tqdm=False)
    if tokens_only:
        with open(out_path, "w") as f:
            json.dump([[(t, None, None, None) for t in o.outputs[0].token_ids] for o in got], f)
        return
    rows = []
    for o in got:
        c = o.outputs[0]
        # per token: (chosen id, its logprob, gap to the runner-up, the top-K as [id, lp])
        tops = [sorted(lp.top, key=lambda t: -t[1]) for lp in c.logprobs]
        rows.append(
            [
                (tok, lp.logprob, _gap(top), [[i, v] for i, v in top])
                for tok, lp, top in zip(c.token_ids, c.logprobs, tops, strict=True)
            ]
        )
    with open(out_path, "w") as f:
        json.dump(rows, f)


def _gap(top: list) -> float:
    """Top-1 minus top-2 logprob of a position's sorted top list."""
    return top[0][1] - top[1][1] if len(top) > 1 else float("inf")


def compare(seqs: list, ref: list, noise: float | None = None) -> dict:
    """Token match, noise over the shared prefixes and the swings where sequences part.
    noise given: a tokens-only run (no logprobs of its own), judged by that noise and the
    reference's gap alone (g_ref <= noise, stricter than a swing within 2 x noise)."""
    measure = noise is None
    noise = noise or 0.0
    same = total = exact = 0
    parts = []  # (g_ref, swing or None where the variant's top-K lacks the reference's token)
    for s, r in zip(seqs, ref, strict=True):
        total += len(r)
        parted = None
        for i, (a, b) in enumerate(zip(s, r, strict=False)):
            if a[0] != b[0]:
                parted = i
                break
            if measure:
                noise = max(noise, abs(a[1] - b[1]))
        same += sum(a[0] == b[0] for a, b in zip(s, r, strict=False))
        if parted is None:
            exact += 1
            continue
        g_ref, (_, lp_var, _, top_var) = r[parted][2], s[parted]
        lp_ref_tok = dict(top_var or []).get(r[parted][0]) if measure else None
        parts.append((g_ref, None if lp_ref_tok is None else g_ref + lp_var - lp_ref_tok))
    if measure:
        unexplained = [p for p in parts if p[1] is None or p[1] > 2 * noise]
    else:
        unexplained = [p for p in parts if p[0] > noise]
    swings = [p[1] for p in parts if p[1] is not None]
    return {
        "token_match": same / max(1, total),
        "exact": exact,
        "n": len(ref),
        "noise": noise,
        "parted_gaps": sorted(p[0] for p in parts),
        "parted_swings": sorted(swings),
        "outside_top_k": sum(p[1] is None for p in parts) if measure else 0,
        "unexplained": len(unexplained),
        "ok": not unexplained,
    }


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        run_variant(os.environ["CHECK_MODEL"], sys.argv[2])
        return 0
    results: dict = {}
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "model")
        save_model(model)
        tokens = {}
        only = os.environ.get("CHECK_VARIANTS")  # comma-separated subset (the first stays)
        keep = set(only.split(",")) | {next(iter(VARIANTS))} if only else set(VARIANTS)
        for name, extra in VARIANTS.items():
            if name not in keep:
                continue
            path = os.path.join(d, f"{name}.json")
            env = dict(os.environ, CHECK_MODEL=model, **extra)
            rc = subprocess.run([sys.executable, __file__, "--worker", path], env=env).returncode
            if rc != 0:
                print(f"{name:16s} FAILED (exit {rc})")
                results[name] = {"error": rc}
                continue
            with open(path) as f:
                tokens[name] = json.load(f)
    ref_name = next(iter(VARIANTS))
    ref = tokens.get(ref_name)
    for name, seqs in tokens.items():
        if ref is None or name == ref_name or name in TOKENS_ONLY:
            continue
        r = compare(seqs, ref)
        results[name] = r
        worst = max(r["parted_gaps"], default=0.0)
        swing = max(r["parted_swings"], default=0.0)
        print(f"{name:16s} vs {ref_name}: token match {r['token_match']:.4f}, exact "
              f"{r['exact']}/{r['n']}, noise {r['noise']:.4f}, parted at gaps <= {worst:.4f}, "
              f"swings <= {swing:.4f} (2 x noise {2 * r['noise']:.4f}), reference token "
              f"outside the top-{TOP_K} {r['outside_top_k']}, unexplained {r['unexplained']} -> "
              f"{'OK' if r['ok'] else 'FAIL'}")  # fmt: skip
    noise = max((r["noise"] for r in results.values() if "noise" in r), default=0.0)
    for name in TOKENS_ONLY:
        if name not in tokens or "defaults" not in tokens:
            continue
        r = compare(tokens[name], tokens["defaults"], noise)
        results[name] = r
        verdict = "OK" if r["ok"] else "FAIL"
        print(f"{name:16s} vs defaults: token match {r['token_match']:.4f}, exact "
              f"{r['exact']}/{r['n']}, parted at gaps {r['parted_gaps'][:6]}, noise "
              f"{noise:.4f}, unexplained {r['unexplained']} -> {verdict}")  # fmt: skip
    if all(n in tokens for n in TOKENS_ONLY):
        a, b = ([[t[0] for t in s] for s in tokens[n]] for n in TOKENS_ONLY)
        exact = sum(x == y for x, y in zip(a, b, strict=True))
        results["fused_vs_unfused_exact"] = exact
        print(f"tokens_fused vs tokens_unfused: {exact}/{len(a)} sequences equal")
    if "block64" in tokens and "defaults" in tokens:
        equal = [[t[0] for t in s] for s in tokens["block64"]] == [
            [t[0] for t in s] for s in tokens["defaults"]
        ]
        results["block64_equals_defaults"] = equal
        print(f"block64 tokens equal to defaults: {equal}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "check_decode_paths.json"), "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
