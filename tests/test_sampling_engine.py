"""Sampling features end to end through the engine (tiny Llama, CPU)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from strixlm.engine.request import SamplingParams
from strixlm.entrypoints.llm import LLM

PROMPT = "The quick brown fox jumps over the lazy dog. Then the dog"
OTHERS = ["Hello", "A long time ago in a galaxy far, far away, there was", "1, 2, 3,"]


@pytest.fixture(scope="module")
def llm(tiny_llama_dir):
    return LLM(
        tiny_llama_dir,
        device="cpu",
        dtype="float32",
        max_model_len=512,
        cpu_kv_cache_bytes=64 << 20,
    )


def _gen(llm, prompts, params):
    return llm.generate(prompts, params, use_tqdm=False)


def test_same_seed_same_tokens_whatever_the_batch(llm):
    p = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=16, seed=7, ignore_eos=True)
    alone = _gen(llm, [PROMPT], p)[0].outputs[0].token_ids
    other = SamplingParams(temperature=0.8, max_tokens=20, ignore_eos=True)
    mixed = _gen(llm, OTHERS + [PROMPT] + OTHERS, [other] * 3 + [p] + [other] * 3)
    assert mixed[3].outputs[0].token_ids == alone
    different = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=16, seed=8, ignore_eos=True)
    assert _gen(llm, [PROMPT], different)[0].outputs[0].token_ids != alone


def test_top_k_1_is_greedy(llm):
    greedy = _gen(llm, [PROMPT], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    topk1 = _gen(
        llm, [PROMPT], SamplingParams(temperature=1.5, top_k=1, max_tokens=12, ignore_eos=True)
    )
    assert greedy[0].outputs[0].token_ids == topk1[0].outputs[0].token_ids


def test_n_samples_share_the_prompt_blocks(tiny_llama_dir):
    llm = LLM(
        tiny_llama_dir,
        device="cpu",
        dtype="float32",
        max_model_len=512,
        block_size=4,
        cpu_kv_cache_bytes=64 << 20,
    )
    out = _gen(
        llm, [PROMPT], SamplingParams(n=3, temperature=1.0, max_tokens=10, seed=1, ignore_eos=True)
    )[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1, "n samples are all the same"
    pool = llm.engine.core.kv_manager.pool
    assert pool.num_hit_blocks >= 2 * (len(out.prompt_token_ids) // 4 - 1)
    again = _gen(
        llm, [PROMPT], SamplingParams(n=3, temperature=1.0, max_tokens=10, seed=1, ignore_eos=True)
    )[0]
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in out.outputs]


def test_stop_strings_and_stop_token_ids(llm):
    base = _gen(llm, [PROMPT], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
    text, toks = base[0].outputs[0].text, base[0].outputs[0].token_ids
    stop = text[5:9]
    out = _gen(llm, [PROMPT], SamplingParams(temperature=0, max_tokens=20, stop=[stop]))[0]
    c = out.outputs[0]
    assert c.text == text[: text.index(stop)] and c.finish_reason == "stop"
    assert c.stop_reason == stop
    kept = _gen(
        llm,
        [PROMPT],
        SamplingParams(temperature=0, max_tokens=20, stop=[stop], include_stop_str_in_output=True),
    )[0].outputs[0]
    assert kept.text == text[: text.index(stop) + len(stop)]
    out = _gen(
        llm, [PROMPT], SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[toks[3]])
    )[0].outputs[0]
    first = toks.index(toks[3])
    assert out.token_ids == toks[: first + 1] and out.stop_reason == toks[3]
    assert out.finish_reason == "stop"


def test_max_tokens_min_tokens_and_eos(llm):
    base = _gen(llm, [PROMPT], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    toks = base[0].outputs[0].token_ids
    assert len(toks) == 8 and base[0].outputs[0].finish_reason == "length"
    # The first greedy token is a stop id, but min_tokens forbids stopping before 4 tokens.
    out = _gen(
        llm,
        [PROMPT],
        SamplingParams(temperature=0, max_tokens=8, min_tokens=4, stop_token_ids=[toks[0]]),
    )[0].outputs[0]
    assert len(out.token_ids) >= 4 and toks[0] not in out.token_ids[:4]


def test_repetition_penalty_matches_hf(tiny_llama_dir, llm):
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    ids = tok.encode(PROMPT)
    # Put the model's next greedy token into the history, so the penalty must change it.
    plain = _gen(llm, [ids], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    ids = plain[0].outputs[0].token_ids[:1] + ids
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=16,
            do_sample=False,
            repetition_penalty=3.0,
            eos_token_id=None,
            pad_token_id=0,
        )
    ref_toks = ref[0, len(ids) :].tolist()
    out = _gen(
        llm,
        [ids],
        SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, repetition_penalty=3.0),
    )[0].outputs[0]
    assert out.token_ids == ref_toks
    plain = _gen(llm, [ids], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    assert plain[0].outputs[0].token_ids != ref_toks, "penalty had no effect"


def test_bad_params_are_rejected_clearly(llm):
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=1.5)
    for name in ("temperature", "repetition_penalty", "top_p", "presence_penalty"):
        for value in (float("nan"), float("inf")):
            with pytest.raises(ValueError, match=f"{name} must be a finite number"):
                SamplingParams(**{name: value})
    with pytest.raises(ValueError, match="maximum context length"):
        _gen(llm, [[5] * 600], SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="maximum context length"):
        _gen(llm, [[5] * 10], SamplingParams(max_tokens=600))
    for bias, match in [
        ({5: 101.0}, "logit_bias values"),
        ({5: float("nan")}, "logit_bias values"),
        ({"5": 1.0}, "logit_bias keys"),
        ({True: 1.0}, "logit_bias keys"),
        ([(5, 1.0)], "logit_bias must map"),
    ]:
        with pytest.raises(ValueError, match=match):
            SamplingParams(logit_bias=bias)
    with pytest.raises(ValueError, match="logit_bias token id 10000000"):
        _gen(llm, [PROMPT], SamplingParams(max_tokens=2, logit_bias={10_000_000: 1.0}))
    # The engine still works and holds no blocks after rejections.
    assert llm.engine.core.kv_manager.usage == 0.0
    assert _gen(llm, [PROMPT], SamplingParams(max_tokens=2))[0].finished


def test_async_and_sync_scheduling_agree(tiny_llama_dir):
    """Planning step N+1 before step N's tokens are known changes nothing, also through
    preemption (tight pool), stop strings and random sampling with engine-assigned seeds."""
    prompts = [PROMPT] + OTHERS * 2
    params = [
        SamplingParams(temperature=0.8, max_tokens=12, seed=i, stop=[" the"])
        for i in range(len(prompts))
    ]
    outs = {}
    for mode in (True, False):
        llm = LLM(
            tiny_llama_dir,
            device="cpu",
            dtype="float32",
            max_model_len=512,
            block_size=4,
            num_gpu_blocks_override=24,
            max_num_batched_tokens=16,
            async_scheduling=mode,
        )
        res = _gen(llm, prompts, params)
        assert llm.engine.core.scheduler.num_preemptions > 0
        assert llm.engine.core.kv_manager.usage == 0.0
        outs[mode] = [(o.outputs[0].token_ids, o.outputs[0].text) for o in res]
    assert outs[True] == outs[False]


def test_fp8_kv_cache(smollm2_dir, monkeypatch):
    """--kv-cache-dtype fp8: the cache holds e4m3 values (a quarter of fp32's bytes per
    block) and a real model's predictions stay with the full-precision cache's: teacher-
    forced on the full-precision greedy output, the fp8 engine ranks that token first at
    nearly every position. (Comparing free-running greedy outputs measures where the first
    near-tie flips, not the cache: one flipped token changes the whole rest.)"""
    # The fp8 kernels are checked against these references in test_triton_attention; here
    # the engine runs the torch references rather than the (slow) Triton interpreter.
    monkeypatch.setenv("STRIXLM_DISABLE_TRITON", "1")
    kw = dict(device="cpu", dtype="float32", max_model_len=256, cpu_kv_cache_bytes=16 << 20)
    full = LLM(smollm2_dir, **kw)
    fp8 = LLM(smollm2_dir, kv_cache_dtype="fp8", **kw)
    runner = fp8.engine.core.runner
    assert runner.kv_caches[0].dtype == torch.float8_e4m3fn
    assert runner.bytes_per_block() * 4 == full.engine.core.runner.bytes_per_block()
    msgs = [
        [{"role": "user", "content": "What is the capital of France?"}],
        [{"role": "user", "content": "Name three colors."}],
    ]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    refs = full.chat(msgs, params, use_tqdm=False)
    seqs = [list(o.prompt_token_ids) + list(o.outputs[0].token_ids) for o in refs]
    forced = fp8.generate(seqs, SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
    ranks = [
        e.rank
        for o, out in zip(refs, forced, strict=True)
        for e in out.prompt_logprobs[len(o.prompt_token_ids) :]
    ]
    assert len(ranks) == 24
    top1 = sum(r == 1 for r in ranks) / len(ranks)
    assert top1 >= 0.9, ranks
    assert max(ranks) <= 3, ranks  # where fp8 disagrees, the reference is a close second
