"""The whole engine under random traffic (tiny Llama and tiny hybrid NemotronH, CPU).

Requests arrive between steps, share prefixes, sample greedily or with seeds (n of 1 or
2), are aborted at random, and preempt each other in a small KV pool, with async
scheduling. Every request that finishes must have the tokens it gets when it runs alone,
and the pool must be empty at the end.

The scheduler simulation (test_scheduler_simulation.py) checks the block tables against a
model of the runner; this checks the real runner: its state-table rows reused across
finished, aborted and preempted requests, its inputs, the prefix cache's KV, the Mamba
state blocks and the stateless sampler's seeds.
"""

from __future__ import annotations

import random

import pytest
from nemotron_h_utils import save_tiny_nemotron_h

from strixlm.config import EngineConfig
from strixlm.engine.llm_engine import LLMEngine
from strixlm.engine.request import SamplingParams

NUM_BLOCKS = 20  # 16-token blocks: ~320 tokens for up to 6 requests of up to ~110
NUM_HYBRID_BLOCKS = 12  # 48-token blocks; a Mamba state block a request, attention from the rest
STEP_LIMIT = 2000


def _engine(model_dir: str, num_blocks: int | None) -> LLMEngine:
    config = EngineConfig.from_flat(
        model=model_dir,
        device="cpu",
        dtype="float32",
        max_model_len=256,
        max_num_seqs=6,
        max_num_batched_tokens=40,
        num_gpu_blocks_override=num_blocks,
        skip_tokenizer_init=True,
    )
    return LLMEngine(config)


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory) -> str:
    """A tiny NemotronH: Mamba-2, attention and MLP layers on one block pool."""
    return save_tiny_nemotron_h(tmp_path_factory.mktemp("nemotron-h-traffic"), "M*-M*-M")


def _traffic(seed: int, vocab: int) -> list[tuple[int, list[int], SamplingParams, float]]:
    """(arrival step, prompt, params, abort probability per step) per request."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(3, vocab) for _ in range(rng.randrange(16, 40))] for _ in range(2)]
    out, step = [], 0
    for i in range(14):
        step += rng.randrange(0, 6)
        prefix = rng.choice(prefixes) if rng.random() < 0.5 else []
        prompt = prefix + [rng.randrange(3, vocab) for _ in range(rng.randrange(1, 50))]
        if rng.random() < 0.5:
            sp = SamplingParams(temperature=0.0, max_tokens=rng.randrange(1, 60), ignore_eos=True)
        else:
            sp = SamplingParams(
                temperature=1.0,
                top_k=rng.choice([0, 20]),
                top_p=rng.choice([1.0, 0.9]),
                seed=1000 + i,
                n=rng.choice([1, 2]),
                max_tokens=rng.randrange(1, 60),
                ignore_eos=True,
            )
        out.append((step, prompt, sp, 0.02 if rng.random() < 0.4 else 0.0))
    return out


def _tokens(output) -> list[list[int]]:
    return [list(c.token_ids) for c in sorted(output.outputs, key=lambda c: c.index)]


@pytest.mark.parametrize(
    "model, seed, num_blocks",
    [("llama", 0, NUM_BLOCKS), ("llama", 1, NUM_BLOCKS), ("llama", 2, NUM_BLOCKS)]
    + [("nemotron_h", 3, NUM_HYBRID_BLOCKS), ("nemotron_h", 4, NUM_HYBRID_BLOCKS)],
)
def test_random_traffic_gives_each_request_its_solo_tokens(request, model, seed, num_blocks):
    model_dir = request.getfixturevalue("tiny_llama_dir" if model == "llama" else "hybrid_dir")
    rng = random.Random(100 + seed)
    traffic = _traffic(seed, 40_000 if model == "llama" else 256)
    engine = _engine(model_dir, num_blocks)
    pool = engine.core.scheduler.kv.pool
    finished, aborted, live = {}, set(), {}
    step = 0
    while step < STEP_LIMIT and (len(finished) + len(aborted) < len(traffic)):
        for i, (arrive, prompt, sp, _) in enumerate(traffic):
            if arrive == step:
                live[engine.add_request(prompt, sp, request_id=f"r{i}", kind="final")] = i
        for rid, i in list(live.items()):
            if rng.random() < traffic[i][3]:
                engine.abort_request(rid)
                aborted.add(rid)
                del live[rid]
        for out in engine.step():
            if out.finished and out.request_id in live:
                finished[out.request_id] = _tokens(out)
                del live[out.request_id]
        step += 1
    while engine.has_unfinished():  # the step in flight, if any
        engine.step()
    assert len(finished) + len(aborted) == len(traffic), "traffic did not drain"
    assert engine.core.scheduler.num_preemptions > 0, "the pool never ran short"
    assert pool.num_free_blocks == pool.num_blocks - 1, "KV blocks leaked"
    # Each finished request alone, on a fresh engine with a roomy pool.
    solo = _engine(model_dir, None)
    for rid, tokens in finished.items():
        _, prompt, sp, _ = traffic[int(rid[1:])]
        solo.add_request(prompt, sp, request_id=rid, kind="final")
        alone = None
        while solo.has_unfinished():
            for out in solo.step():
                if out.finished:
                    alone = _tokens(out)
        assert tokens == alone, rid
        assert [len(t) for t in tokens] == [sp.max_tokens] * sp.n
