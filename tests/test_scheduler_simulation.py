"""The scheduler and the KV-cache manager under random traffic, against a simulated runner.

The runner keeps its own per-request state (tokens, computed count, block table), as the
model runner's persistent state tables do, and a simulated KV cache: the value a token
leaves at its slot stands for its K / V, a function of the token and everything before it,
as in a transformer. Each step writes the scheduled tokens' values through the block table
and reads back every earlier position of each scheduled request, so a wrong block table, a
prefix-cache hit on the wrong block, or a block reused while still referenced shows up as
a wrong read. The "model" samples a token from the values it read, so a request preempted
and recomputed must produce the same tokens as one never preempted.

Each run mixes arrivals, shared prefixes, aborts, EOS, chunked prefill, preemption and
async scheduling (step N + 1 planned before step N's tokens are seen), and checks the
budgets every step and an empty pool at the end.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

import pytest

from strixlm.config import SchedulerConfig
from strixlm.core.kv_cache_manager import FULL_ATTENTION, MAMBA, KVCacheGroupSpec, KVCacheManager
from strixlm.core.scheduler import Scheduler, SchedulerOutput
from strixlm.engine.request import Request, RequestStatus, SamplingParams

VOCAB = 50
EOS = 0


def _kv_value(tokens: list[int]) -> int:
    """What the last of these tokens leaves in the cache (depends on the whole prefix)."""
    return zlib.crc32(bytes(str(tokens), "ascii"))


def _next_token(kv_values: list[int]) -> int:
    return zlib.crc32(bytes(str(kv_values), "ascii")) % VOCAB


def reference_outputs(prompt: list[int], max_tokens: int, max_len: int, eos: bool) -> list[int]:
    """The tokens a request gets when run alone and never preempted."""
    tokens, out = list(prompt), []
    while len(out) < max_tokens and len(tokens) < max_len:
        tok = _next_token([_kv_value(tokens[: p + 1]) for p in range(len(tokens))])
        out.append(tok)
        tokens.append(tok)
        if eos and tok == EOS:
            break
    return out


@dataclass
class _RowState:
    tokens: list[int]
    computed: int
    blocks: list[int] = field(default_factory=list)  # attention blocks
    state_block: int | None = None  # a hybrid model's Mamba state block


class SimRunner:
    """Executes scheduler outputs on a simulated paged KV cache."""

    def __init__(self, block_size: int, hybrid: bool) -> None:
        self.block_size = block_size
        self.hybrid = hybrid
        self.rows: dict[str, _RowState] = {}
        self.cache: dict[tuple[int, int], int] = {}  # (block, offset) -> KV value
        # Mamba state block -> the KV value of the last token folded into it.
        self.states: dict[int, int] = {}

    def _slot(self, row: _RowState, pos: int) -> tuple[int, int]:
        return row.blocks[pos // self.block_size], pos % self.block_size

    def execute(self, sched: SchedulerOutput) -> dict[str, int]:
        for rid in sched.finished_req_ids:
            self.rows.pop(rid, None)
        for new in sched.new_reqs:
            req = new.request
            row = _RowState(list(req.all_token_ids), new.num_computed_tokens)
            row.blocks = list(new.block_ids[0])
            if self.hybrid:
                (row.state_block,) = new.block_ids[1]  # one state block a request
            self.rows[req.request_id] = row
        for cached in sched.cached_reqs:
            self.rows[cached.request_id].blocks.extend(cached.new_block_ids[0])
            if self.hybrid:
                assert not cached.new_block_ids[1], "a second Mamba state block"
        sampled = {}
        for rid, n in sched.num_scheduled_tokens.items():
            row = self.rows[rid]
            start = row.computed
            assert n >= 1, "a scheduled request must compute a token (logits need one)"
            assert start + n <= len(row.tokens), "scheduled a token the runner does not have"
            assert len(row.blocks) * self.block_size >= start + n, "block table too short"
            assert 0 not in row.blocks, "the null block handed to a request"
            for pos in range(start, start + n):
                self.cache[self._slot(row, pos)] = _kv_value(row.tokens[: pos + 1])
            read = [self.cache.get(self._slot(row, pos)) for pos in range(start + n)]
            want = [_kv_value(row.tokens[: pos + 1]) for pos in range(start + n)]
            assert read == want, f"{rid}: KV read through its block table is wrong"
            if self.hybrid:
                # The state carries on from the last computed token (nothing before a
                # prompt's first chunk), and is left at this step's last.
                blk = row.state_block
                assert start == 0 or self.states.get(blk) == want[start - 1], f"{rid}: state"
                self.states[blk] = want[-1]
            row.computed = start + n
            if row.computed == len(row.tokens):
                tok = _next_token(read)
                row.tokens.append(tok)
                sampled[rid] = tok
        return sampled


@dataclass
class Traffic:
    seed: int
    async_scheduling: bool
    enable_caching: bool
    chunked: bool
    budget: int
    num_blocks: int
    block_size: int = 4
    max_num_seqs: int = 6
    max_model_len: int = 60
    hybrid: bool = False  # attention blocks plus one Mamba state block a request


def _check_pool(sched: Scheduler) -> None:
    """Every block's reference count is the number of live requests holding it, and the
    free queue holds exactly the unreferenced blocks."""
    kv, pool = sched.kv, sched.kv.pool
    held: dict[int, int] = {}
    for blocks in kv.req_blocks.values():
        for bid in (b for group in blocks for b in group):
            held[bid] = held.get(bid, 0) + 1
    for blk in pool.blocks[1:]:
        assert blk.ref_cnt == held.get(blk.block_id, 0), f"block {blk.block_id} ref count"
        assert (blk.ref_cnt == 0) == (blk.block_id in pool.free_queue)
    live = {r.request_id for r in sched.running}
    assert set(kv.req_blocks) <= live, "blocks held by a request that is not running"


def run_traffic(cfg: Traffic) -> tuple[Scheduler, dict[str, Request], set[str]]:
    rng = random.Random(cfg.seed)
    groups = [KVCacheGroupSpec(FULL_ATTENTION, ("a0",), cfg.block_size)]
    if cfg.hybrid:
        groups.append(KVCacheGroupSpec(MAMBA, ("m0",), cfg.block_size))
    kv = KVCacheManager(groups, cfg.num_blocks, cfg.block_size, cfg.enable_caching)
    sched_cfg = SchedulerConfig(cfg.max_num_seqs, cfg.budget, cfg.chunked)
    sched = Scheduler(sched_cfg, kv, cfg.max_model_len)
    runner = SimRunner(cfg.block_size, cfg.hybrid)
    prefixes = [[rng.randrange(1, VOCAB) for _ in range(rng.randrange(4, 20))] for _ in range(3)]
    requests: dict[str, Request] = {}
    aborted: set[str] = set()
    in_flight: tuple[SchedulerOutput, dict[str, int]] | None = None
    num_arrivals = 24
    for _ in range(3000):
        if len(requests) < num_arrivals and rng.random() < 0.35:
            prefix = rng.choice(prefixes) if rng.random() < 0.6 else []
            prompt = prefix + [rng.randrange(1, VOCAB) for _ in range(rng.randrange(1, 30))]
            prompt = prompt[: cfg.max_model_len - 1]
            if not cfg.chunked:
                prompt = prompt[: cfg.budget]
            eos = rng.random() < 0.3
            sp = SamplingParams(max_tokens=rng.randrange(1, 40), ignore_eos=not eos)
            req = Request(f"r{len(requests)}", prompt, sp, eos_token_id=EOS)
            requests[req.request_id] = req
            sched.add_request(req)
        if sched.requests and rng.random() < 0.03:
            victim = rng.choice(sorted(sched.requests))
            sched.finish_requests([victim], RequestStatus.FINISHED_ABORTED)
            aborted.add(victim)
        out = sched.schedule()
        assert out.total_num_scheduled_tokens <= cfg.budget
        assert len(sched.running) <= cfg.max_num_seqs
        sampled = runner.execute(out)
        if cfg.async_scheduling:
            done, in_flight = in_flight, ((out, sampled) if out.num_scheduled_tokens else None)
        else:
            done = (out, sampled)
        if done is not None:
            sched.update_from_output(*done)
        _check_pool(sched)
        if len(requests) == num_arrivals and not sched.has_unfinished() and in_flight is None:
            break
    else:
        raise AssertionError(f"traffic did not drain: {len(sched.requests)} requests left")
    return sched, requests, aborted


CONFIGS = [
    Traffic(seed, async_scheduling, caching, chunked, budget, num_blocks)
    for seed in range(6)
    for async_scheduling in (True, False)
    for caching, chunked, budget, num_blocks in (
        (True, True, 16, 24),  # tight pool: preemption
        (True, True, 64, 200),  # roomy pool: prefix hits across requests
        (False, True, 8, 30),  # no prefix cache, small budget: long chunking
        (True, False, 64, 40),  # whole prompts only
    )
] + [Traffic(seed, True, True, True, 16, 30, hybrid=True) for seed in range(4)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c}".replace(" ", ""))
def test_random_traffic_keeps_kv_and_tokens_right(cfg: Traffic):
    sched, requests, aborted = run_traffic(cfg)
    pool = sched.kv.pool
    assert pool.num_free_blocks == pool.num_blocks - 1, "blocks leaked"
    assert not sched.kv.req_blocks and not sched.requests
    for rid, req in requests.items():
        if rid in aborted:
            continue
        sp = req.sampling_params
        want = reference_outputs(
            req.prompt_token_ids, sp.max_tokens, cfg.max_model_len, eos=not sp.ignore_eos
        )
        assert req.output_token_ids == want, rid
        if req.output_token_ids[-1:] == [EOS] and not sp.ignore_eos:
            assert req.status == RequestStatus.FINISHED_STOPPED
        else:
            assert req.status == RequestStatus.FINISHED_LENGTH


def test_the_traffic_exercises_preemption_prefix_hits_and_every_stop():
    """The configs above reach the paths they are there for."""
    preempted = hits = at_max_len = at_eos = num_aborted = 0
    for cfg in CONFIGS:
        sched, requests, aborted = run_traffic(cfg)
        preempted += sched.num_preemptions
        hits += sched.kv.pool.num_hit_blocks
        num_aborted += len(aborted)
        for req in requests.values():
            at_max_len += req.num_tokens == cfg.max_model_len and req.num_output_tokens < (
                req.sampling_params.max_tokens
            )
            at_eos += req.status == RequestStatus.FINISHED_STOPPED
    assert preempted > 20 and hits > 50
    assert at_max_len > 5 and at_eos > 5 and num_aborted > 5
