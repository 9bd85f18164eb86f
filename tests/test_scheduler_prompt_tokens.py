"""The scheduler counts the prompt tokens each step computes (the server's prompt
throughput and strixlm:prompt_tokens): chunks, prefix-cache hits, one-token prompts, and
not a preempted request's recomputed outputs."""

from __future__ import annotations

from strixlm.config import SchedulerConfig
from strixlm.core.kv_cache_manager import FULL_ATTENTION, KVCacheGroupSpec, KVCacheManager
from strixlm.core.scheduler import Scheduler
from strixlm.engine.request import Request, SamplingParams

BLOCK = 16


def _scheduler(budget: int, num_blocks: int = 64) -> Scheduler:
    groups = [KVCacheGroupSpec(FULL_ATTENTION, ("a0",), BLOCK)]
    kv = KVCacheManager(groups, num_blocks=num_blocks, block_size=BLOCK, enable_caching=True)
    return Scheduler(SchedulerConfig(max_num_batched_tokens=budget), kv, max_model_len=4096)


def _request(rid: str, prompt: list[int], max_tokens: int = 4) -> Request:
    return Request(rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))


def _step(sched: Scheduler, token: int = 7) -> tuple[int, int]:
    """One synchronous step: (prompt tokens counted, tokens scheduled)."""
    out = sched.schedule()
    sampled = {
        rid: token
        for rid in out.num_scheduled_tokens
        if sched.requests[rid].num_computed_tokens == sched.requests[rid].num_tokens
    }
    sched.update_from_output(out, sampled)
    return out.num_prompt_tokens, out.total_num_scheduled_tokens


def test_chunked_prompts_count_every_prompt_token_once():
    sched = _scheduler(budget=64)
    sched.add_request(_request("a", list(range(100))))
    sched.add_request(_request("b", [5]))  # a one-token prompt counts its token
    steps = [_step(sched) for _ in range(5)]
    # 64 of a; 36 of a + b's one + ... then decodes only.
    assert steps[0] == (64, 64)
    assert steps[1] == (37, 37)
    assert [p for p, _ in steps[2:]] == [0, 0, 0]
    assert sum(p for p, _ in steps) == 101


def test_prefix_cache_hits_are_not_computed_prompt_tokens():
    sched = _scheduler(budget=512)
    prompt = list(range(3 * BLOCK + 5))
    sched.add_request(_request("a", prompt, max_tokens=1))
    assert _step(sched) == (len(prompt), len(prompt))
    sched.add_request(_request("b", prompt, max_tokens=1))
    # Three full blocks hit the cache; the 5 tokens after them are computed.
    assert _step(sched) == (5, 5)


def test_recomputed_outputs_after_preemption_are_not_prompt_tokens():
    # Two blocks for two requests that each need two: one is preempted, and recomputes
    # its prompt (counted again: it is computed again) and its outputs (not counted).
    sched = _scheduler(budget=256, num_blocks=5)
    sched.add_request(_request("a", list(range(BLOCK + 4)), max_tokens=40))
    sched.add_request(_request("b", list(range(100, 100 + BLOCK + 4)), max_tokens=40))
    counted = scheduled = 0
    for _ in range(80):
        if not sched.requests or all(r.status.finished for r in sched.requests.values()):
            break
        p, n = _step(sched)
        counted += p
        scheduled += n
    assert sched.num_preemptions > 0
    prompts = 2 * (BLOCK + 4)
    recomputed_prompts = counted - prompts
    assert recomputed_prompts % (BLOCK + 4) == 0 and recomputed_prompts > 0
    # Everything else scheduled was a decode or a recomputed output.
    assert scheduled > counted + 2 * 39
