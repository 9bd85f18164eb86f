"""Prompt logprobs (SamplingParams.prompt_logprobs) against HF transformers: chunked
prefill, preemption, the prefix cache, and /v1/completions with echo."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from strixlm.engine.request import SamplingParams
from strixlm.entrypoints.llm import LLM

ATOL = 2e-3
TEXTS = [
    "Once upon a time, in a land far away, there lived a king who had three daughters. "
    "The youngest daughter was the bravest of them all, and she",
    "In 1905, Albert Einstein published four papers that changed physics. The first one "
    "explained the photoelectric effect, and the second",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + "
    "fibonacci(n - 2)\n\nprint(",
]
K = 5


@pytest.fixture(scope="module")
def prompts(tiny_llama_dir) -> list[list[int]]:
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    out = [tok.encode(t) for t in TEXTS]
    assert all(25 <= len(p) <= 60 for p in out), [len(p) for p in out]
    return out


@pytest.fixture(scope="module")
def hf_logprobs(tiny_llama_dir, prompts) -> list[torch.Tensor]:
    """log_softmax of HF's forward logits at every prompt position."""
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return [torch.log_softmax(model(torch.tensor([p])).logits[0].float(), -1) for p in prompts]


def check(out, prompt: list[int], ref: torch.Tensor, k: int = K) -> None:
    plp = out.prompt_logprobs
    assert plp is not None and len(plp) == len(prompt)
    assert plp[0] is None
    for j in range(1, len(prompt)):
        e, row = plp[j], ref[j - 1]
        assert e.token_id == prompt[j]
        assert abs(e.logprob - row[prompt[j]].item()) < ATOL, f"position {j}"
        val = row[prompt[j]].item()
        assert 1 + int((row > val + ATOL).sum()) <= e.rank <= 1 + int((row > val - ATOL).sum())
        assert len(e.top) == k
        ref_top = torch.topk(row, k)
        assert [t for t, _ in e.top][:1] == ref_top.indices.tolist()[:1]
        for tid, val in e.top:
            assert abs(val - row[tid].item()) < ATOL
        if k:
            assert abs(e.top[-1][1] - ref_top.values[-1].item()) < ATOL


def params() -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, prompt_logprobs=K)


def test_chunked_prompt_logprobs_match_hf(tiny_llama_dir, prompts, hf_logprobs):
    llm = LLM(
        tiny_llama_dir,
        device="cpu",
        dtype="float32",
        max_model_len=256,
        max_num_batched_tokens=16,
        enable_prefix_caching=False,
    )
    outs = llm.generate(prompts, params(), use_tqdm=False)
    for o, p, ref in zip(outs, prompts, hf_logprobs, strict=True):
        check(o, p, ref)
    # Without the parameter there are none; with 0 only the prompt token itself.
    plain = llm.generate(prompts[:1], SamplingParams(max_tokens=2), use_tqdm=False)[0]
    assert plain.prompt_logprobs is None
    sp0 = SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=0)
    zero = llm.generate(prompts[:1], sp0, use_tqdm=False)[0]
    check(zero, prompts[0], hf_logprobs[0], k=0)


def test_prompt_logprobs_after_preemption_and_with_prefix_cache(
    tiny_llama_dir, prompts, hf_logprobs, monkeypatch
):
    """A pool too small for the batch preempts requests in the middle of their prompts:
    recomputed prompt positions must not repeat. With the prefix cache on, a second
    identical request still gets them all."""
    from strixlm.core.scheduler import Scheduler

    recomputed = []
    update = Scheduler.update_from_output

    def spy(self, sched, sampled, logprobs=None, prompt_logprobs=None):
        for rid, (start, _) in (prompt_logprobs or {}).items():
            req = self.requests.get(rid)
            if req is not None and start < len(req.prompt_logprobs):
                recomputed.append(rid)
        return update(self, sched, sampled, logprobs, prompt_logprobs)

    monkeypatch.setattr(Scheduler, "update_from_output", spy)
    # 20-token prompt prefixes (two chunks at 16 tokens a step) and 8 new tokens: each
    # request fits the 8 usable blocks alone, six of them preempt one another. Every
    # prompt logprob kernel row runs in the interpreter here, so fewer rows is faster.
    short = [p[:20] for p in prompts]
    llm = LLM(
        tiny_llama_dir,
        device="cpu",
        dtype="float32",
        max_model_len=256,
        block_size=4,
        max_num_batched_tokens=16,
        num_gpu_blocks_override=9,
    )
    sp = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, prompt_logprobs=K)
    first = llm.generate(short * 2, sp, use_tqdm=False)
    assert llm.engine.core.scheduler.num_preemptions > 0
    assert recomputed, "no request was preempted before its prompt logprobs were sent"
    # A causal model: a prefix's logprobs are the full prompt's first rows.
    for o, p, ref in zip(first, short * 2, hf_logprobs * 2, strict=True):
        check(o, p, ref)
    # The same prompt twice in a row: the second could hit the first's blocks, but takes
    # no hit and still gets every prompt logprob.
    for _ in range(2):
        again = llm.generate(short[:1], sp, use_tqdm=False)[0]
        assert again.num_cached_tokens == 0
        check(again, short[0], hf_logprobs[0])
    # A request without prompt logprobs still hits the cache.
    plain = llm.generate(short[:1], SamplingParams(max_tokens=2), use_tqdm=False)[0]
    assert plain.num_cached_tokens > 0


@pytest.mark.parametrize("bad", [-1, 21, 1.5, True])
def test_bad_prompt_logprobs_rejected(bad):
    with pytest.raises(ValueError):
        SamplingParams(prompt_logprobs=bad)


# ---- server ----------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def early_server(request):
    """The server boots in the background while the offline tests above run."""
    from server_utils import boot_early_for

    yield from boot_early_for(
        request, "server", request.getfixturevalue("tiny_llama_dir"),
        "--dtype", "float32",
        "--max-model-len", "256",
        "--max-num-batched-tokens", "16",
        "--kv-cache-memory", str(64 << 20),
    )  # fmt: skip


@pytest.fixture(scope="module")
def server(early_server):
    return early_server.get()


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)


def test_server_echo_logprobs(client, tiny_llama_dir, prompts, hf_logprobs):
    prompt = prompts[0]
    resp = client.completions.create(
        model=tiny_llama_dir,
        prompt=prompt,
        max_tokens=4,
        temperature=0,
        echo=True,
        logprobs=3,
    )
    lp = resp.choices[0].logprobs
    n = len(prompt) + 4
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
    assert len(lp.text_offset) == n and lp.text_offset == sorted(lp.text_offset)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    ref = hf_logprobs[0]
    for j in range(1, len(prompt)):
        assert abs(lp.token_logprobs[j] - ref[j - 1][prompt[j]].item()) < ATOL
        assert 3 <= len(lp.top_logprobs[j]) <= 4
        best = max(lp.top_logprobs[j].values())
        assert abs(best - ref[j - 1].max().item()) < ATOL
    assert resp.choices[0].text.startswith(TEXTS[0])
    assert all(x is not None for x in lp.token_logprobs[len(prompt) :])

    # Streaming carries the same values.
    chunks = list(
        client.completions.create(
            model=tiny_llama_dir,
            prompt=prompt,
            max_tokens=4,
            temperature=0,
            echo=True,
            logprobs=3,
            stream=True,
        )
    )
    streamed = [
        x for c in chunks for ch in c.choices if ch.logprobs for x in ch.logprobs.token_logprobs
    ]
    assert streamed == lp.token_logprobs


def test_server_vllm_prompt_logprobs(client, tiny_llama_dir, prompts, hf_logprobs):
    prompt = prompts[1]
    resp = client.completions.create(
        model=tiny_llama_dir,
        prompt=prompt,
        max_tokens=2,
        temperature=0,
        extra_body={"prompt_logprobs": 2},
    )
    plp = resp.choices[0].model_extra["prompt_logprobs"]
    assert len(plp) == len(prompt) and plp[0] is None
    ref = hf_logprobs[1]
    for j in range(1, len(prompt)):
        entry = plp[j][str(prompt[j])]
        assert abs(entry["logprob"] - ref[j - 1][prompt[j]].item()) < ATOL
        assert entry["rank"] >= 1 and isinstance(entry["decoded_token"], str)
        assert 2 <= len(plp[j]) <= 3


@pytest.mark.parametrize(
    "bad",
    [
        {"prompt_logprobs": 21},
        {"prompt_logprobs": -1},
        {"prompt_logprobs": "x"},
        {"logprobs": 21, "echo": True},
    ],
)
def test_server_bad_prompt_logprobs(client, tiny_llama_dir, bad):
    import openai

    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=tiny_llama_dir, prompt="hi", max_tokens=2, extra_body=bad)
