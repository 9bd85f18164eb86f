"""strixlm against HF transformers: greedy tokens and logprobs, alone and batched, and the
same tokens through the prefix cache, preemption and chunked prefill."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from strixlm.engine.request import SamplingParams
from strixlm.entrypoints.llm import LLM

PROMPTS = [
    "Hi",
    "The capital of France is",
    "Write a haiku about the sea. The sea is",
    "Once upon a time, in a land far away, there lived a king who had three daughters. "
    "The youngest daughter was",
    "def fibonacci(n):\n    ",
    "List three colors: red, green,",
    "In 1905, Albert Einstein published four papers that changed physics. The first one "
    "explained the photoelectric effect, the second Brownian motion, the third special "
    "relativity and the fourth mass-energy equivalence. Today, physicists consider",
]
MAX_TOKENS = 24
# Per model: (new tokens, KV blocks for the preemption test). SmolLM2 (135M) takes ~20x
# longer a step than the tiny models on CPU, HF and us alike: half the tokens, and a pool
# that still preempts (3 times) and still leaves a prefix to hit with them.
BUDGETS = {"smollm2": (12, 26), "tiny_llama": (MAX_TOKENS, 40), "tiny_qwen3": (MAX_TOKENS, 40)}
# fp32 on CPU: our logprobs agree with HF's log_softmax to this absolute tolerance.
LOGPROB_ATOL = 2e-3


def hf_reference(folder: str, prompts: list[list[int]], max_tokens: int, **generate_kwargs):
    """Greedy continuation and per-step log-softmax from HF, one prompt at a time
    (generate_kwargs: more of generate's options, e.g. sequence_bias)."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out = []
    for ids in prompts:
        with torch.no_grad():
            g = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=max_tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
                output_logits=True,
                return_dict_in_generate=True,
                **generate_kwargs,
            )
        toks = g.sequences[0, len(ids) :].tolist()
        lps = [torch.log_softmax(step[0].float(), -1) for step in g.logits]
        out.append((toks, lps))
    return out


def encode(folder: str) -> list[list[int]]:
    tok = AutoTokenizer.from_pretrained(folder)
    return [tok.encode(p) for p in PROMPTS]


@pytest.fixture(scope="module", params=["smollm2", "tiny_llama", "tiny_qwen3"])
def case(request):
    folder = request.getfixturevalue(f"{request.param}_dir")
    prompts = encode(folder)
    n, blocks = BUDGETS[request.param]
    greedy = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=5)
    return folder, prompts, hf_reference(folder, prompts, n), greedy, blocks


# The full-length greedy request, for the other HF comparisons (test_qwen3_moe_hf.py).
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=5)


def check_against_hf(outs, refs, logprob_check: bool = True) -> None:
    for i, (o, (ref_toks, ref_lps)) in enumerate(zip(outs, refs, strict=True)):
        c = o.outputs[0]
        assert c.token_ids == ref_toks, f"prompt {i}: greedy tokens differ from HF"
        if not logprob_check:
            continue
        for step, lp in enumerate(c.logprobs):
            ref = ref_lps[step]
            assert abs(lp.logprob - ref[lp.token_id].item()) < LOGPROB_ATOL
            for tid, val in lp.top:
                assert abs(val - ref[tid].item()) < LOGPROB_ATOL, f"prompt {i} step {step}"
            ref_top = torch.topk(ref, 5).indices.tolist()
            assert [t for t, _ in lp.top][:1] == ref_top[:1]


SMALL_KV = 64 << 20


def test_greedy_alone_and_batched_match_hf(case):
    """Each prompt alone, then all together, with no prefix cache to help."""
    folder, prompts, refs, greedy, _ = case
    llm = LLM(
        folder,
        device="cpu",
        dtype="float32",
        max_model_len=512,
        enable_prefix_caching=False,
        cpu_kv_cache_bytes=SMALL_KV,
    )
    alone = [llm.generate([p], greedy, use_tqdm=False)[0] for p in prompts]
    check_against_hf(alone, refs)
    batched = llm.generate(prompts, greedy, use_tqdm=False)
    check_against_hf(batched, refs)


def test_prefix_cache_preemption_and_chunked_prefill_keep_tokens(case):
    """A tight engine: 4-token blocks, an 8-token step budget and a pool too small for the
    batch. The first pass preempts; the second pass hits the prefix cache."""
    folder, prompts, refs, greedy, blocks = case
    llm = LLM(
        folder,
        device="cpu",
        dtype="float32",
        max_model_len=512,
        block_size=4,
        max_num_batched_tokens=8,
        num_gpu_blocks_override=blocks,
    )
    first = llm.generate(prompts, greedy, use_tqdm=False)
    assert llm.engine.core.scheduler.num_preemptions > 0
    check_against_hf(first, refs)
    again = llm.generate(prompts, greedy, use_tqdm=False)
    assert any(o.num_cached_tokens > 0 for o in again), "second pass found no cached prefix"
    check_against_hf(again, refs)


@pytest.mark.parametrize("budget", [1, 3])
def test_tiny_budgets_and_no_chunking(tiny_llama_dir, budget):
    """Degenerate budgets: one token per step, and chunked prefill off (whole prompts)."""
    prompts = encode(tiny_llama_dir)[:4]
    refs = hf_reference(tiny_llama_dir, prompts, 8)
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    llm = LLM(
        tiny_llama_dir,
        device="cpu",
        dtype="float32",
        max_model_len=512,
        max_num_batched_tokens=budget,
        cpu_kv_cache_bytes=SMALL_KV,
    )
    check_against_hf(llm.generate(prompts, params, use_tqdm=False), refs, logprob_check=False)
    llm = LLM(
        tiny_llama_dir,
        device="cpu",
        dtype="float32",
        max_model_len=512,
        max_num_batched_tokens=256,
        enable_chunked_prefill=False,
        cpu_kv_cache_bytes=SMALL_KV,
    )
    check_against_hf(llm.generate(prompts, params, use_tqdm=False), refs, logprob_check=False)
