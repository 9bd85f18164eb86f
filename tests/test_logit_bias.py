"""logit_bias through the engine, against HF transformers' SequenceBiasLogitsProcessor
(single-token sequences: the same additive bias on the logits) on greedy decoding, with
biased and unbiased requests in one batch."""

from __future__ import annotations

from test_correctness_hf import encode, hf_reference

from strixlm.engine.request import SamplingParams
from strixlm.entrypoints.llm import LLM

MAX_TOKENS = 8


def hf_greedy(folder: str, prompts: list[list[int]], bias: dict[int, float] | None):
    kw = {"sequence_bias": [[[t], b] for t, b in bias.items()]} if bias else {}
    return [toks for toks, _ in hf_reference(folder, prompts, MAX_TOKENS, **kw)]


def test_greedy_with_logit_bias_matches_hf(tiny_qwen3_dir):
    prompts = encode(tiny_qwen3_dir)[:3]
    plain = hf_greedy(tiny_qwen3_dir, prompts, None)
    # Ban each prompt's first greedy token, push one of its later tokens down a little and
    # lift an unrelated token: the continuations change, and HF has to agree on how.
    bias = {plain[0][0]: -100.0, plain[1][0]: -100.0, plain[2][3]: -2.5, 1000: 3.0}
    refs = hf_greedy(tiny_qwen3_dir, prompts, bias)
    assert all(r != p for r, p in zip(refs, plain, strict=True))

    llm = LLM(tiny_qwen3_dir, device="cpu", dtype="float32", max_model_len=256)
    greedy = dict(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    biased = SamplingParams(**greedy, logit_bias=bias)
    params = [biased, SamplingParams(**greedy), biased]  # one batch, one row unbiased
    outs = llm.generate(prompts, params, use_tqdm=False)
    got = [o.outputs[0].token_ids for o in outs]
    assert got == [refs[0], plain[1], refs[2]]
