"""Continuous batching with chunked prefill under a token budget, and preemption by recompute.

There is no prefill or decode phase: each request has num_computed_tokens and num_tokens, and
a step gives each scheduled request some of the difference. Running requests go first; new
ones are admitted while budget, sequence slots and KV blocks last. When the pool runs dry, the
most recently admitted running request is preempted: its blocks are freed and it restarts
later from its prompt plus what it has generated (the prefix cache often makes that cheap).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from strixlm.config import SchedulerConfig
from strixlm.core.kv_cache_manager import KVCacheManager
from strixlm.engine.request import EngineCoreOutput, Request, RequestStatus, TokenLogprob


@dataclass
class NewRequestData:
    """A request entering the runner: new, or resumed after preemption."""

    request: Request
    block_ids: list[list[int]]
    num_computed_tokens: int


@dataclass
class CachedRequestData:
    request_id: str
    new_block_ids: list[list[int]]


@dataclass
class SchedulerOutput:
    new_reqs: list[NewRequestData] = field(default_factory=list)
    cached_reqs: list[CachedRequestData] = field(default_factory=list)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    # Requests the runner should drop (finished, aborted or preempted) before this step.
    finished_req_ids: set[str] = field(default_factory=set)
    # Prompt tokens computed this step (prefix-cache hits are not computed; a preempted
    # request's recomputed outputs are not prompt tokens).
    num_prompt_tokens: int = 0

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())

    @property
    def is_empty(self) -> bool:
        return not self.num_scheduled_tokens


def _prompt_tokens_in(req: Request, start: int, n: int) -> int:
    """How many of the tokens [start, start + n) of req are its prompt's."""
    return max(0, min(start + n, req.num_prompt_tokens) - start)


@dataclass
class SchedulerStats:
    num_running: int
    num_waiting: int
    kv_cache_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int


class Scheduler:
    def __init__(
        self, config: SchedulerConfig, kv_manager: KVCacheManager, max_model_len: int
    ) -> None:
        self.config = config
        self.kv = kv_manager
        self.max_model_len = max_model_len
        self.requests: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._finished_ids: set[str] = set()
        self.num_preemptions = 0

    # ---- admission and removal ---------------------------------------------------------
    def add_request(self, request: Request) -> None:
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def finish_requests(self, request_ids: list[str], status: RequestStatus) -> None:
        for rid in request_ids:
            req = self.requests.get(rid)
            if req is None or req.status.finished:
                continue
            if req.status == RequestStatus.RUNNING:
                self.running.remove(req)
            else:
                self.waiting.remove(req)
            self._finish(req, status)

    def _finish(self, req: Request, status: RequestStatus) -> None:
        req.status = status
        self.kv.free(req)
        self._finished_ids.add(req.request_id)
        del self.requests[req.request_id]

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def stats(self) -> SchedulerStats:
        pool = self.kv.pool
        return SchedulerStats(
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_cache_usage=self.kv.usage,
            prefix_cache_queries=pool.num_queried_blocks,
            prefix_cache_hits=pool.num_hit_blocks,
            num_preemptions=self.num_preemptions,
        )

    # ---- one step's plan ---------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(finished_req_ids=self._finished_ids)
        self._finished_ids = set()
        budget = self.config.max_num_batched_tokens
        preempted = False

        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            pending = req.num_output_placeholders
            n = min(req.num_tokens + pending - req.num_computed_tokens, budget)
            n = min(n, self.max_model_len - req.num_computed_tokens)
            if n <= 0 or req.num_output_tokens + pending >= req.max_tokens:
                # Nothing to compute, or its last token is already on its way.
                i += 1
                continue
            before = self.kv.num_blocks_of(req.request_id)
            while not (grew := self.kv.allocate_slots(req, n)):
                victim = self.running.pop()
                self._preempt(victim, out)
                preempted = True
                if victim is req:
                    break
            else:
                if grew is not KVCacheManager.FITS:
                    # The runner hears only of block-table changes.
                    after = self.kv.blocks_of(req.request_id)
                    new_ids = [a[b:] for a, b in zip(after, before, strict=True)]
                    out.cached_reqs.append(CachedRequestData(req.request_id, new_ids))
                out.num_scheduled_tokens[req.request_id] = n
                out.num_prompt_tokens += _prompt_tokens_in(req, req.num_computed_tokens, n)
                req.num_computed_tokens += n
                self._expect_sample(req)
                budget -= n
                i += 1

        while (
            self.waiting
            and not preempted
            and budget > 0
            and len(self.running) < self.config.max_num_seqs
        ):
            req = self.waiting[0]
            hits, num_hit_tokens = self.kv.get_computed_blocks(req)
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = num_hit_tokens
            n = req.num_tokens - num_hit_tokens
            if n > budget and not self.config.enable_chunked_prefill:
                break
            n = min(n, budget)
            req.num_computed_tokens = 0
            if not self.kv.allocate_slots(req, n, hits):
                break
            self.waiting.popleft()
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            out.new_reqs.append(
                NewRequestData(
                    req, [list(b) for b in self.kv.blocks_of(req.request_id)], num_hit_tokens
                )
            )
            out.num_scheduled_tokens[req.request_id] = n
            out.num_prompt_tokens += _prompt_tokens_in(req, num_hit_tokens, n)
            req.num_computed_tokens = num_hit_tokens + n
            self._expect_sample(req)
            budget -= n
        return out

    @staticmethod
    def _expect_sample(req: Request) -> None:
        """A step that reaches the end of the known tokens samples one more."""
        if req.num_computed_tokens == req.num_tokens + req.num_output_placeholders:
            req.num_output_placeholders += 1

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        self.kv.free(req)
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        # A token still in flight for it is dropped; the stateless sampler redraws the
        # same one when the request runs again.
        req.num_output_placeholders = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        out.finished_req_ids.add(req.request_id)

    # ---- results -----------------------------------------------------------------------
    def update_from_output(
        self,
        sched: SchedulerOutput,
        sampled: dict[str, int],
        logprobs: dict[str, TokenLogprob] | None = None,
        prompt_logprobs: dict[str, tuple[int, list[TokenLogprob]]] | None = None,
    ) -> list[EngineCoreOutput]:
        """Append sampled tokens, apply stop rules, free what finished."""
        for rid, (start, entries) in (prompt_logprobs or {}).items():
            req = self.requests.get(rid)
            if req is None or req.prompt_logprobs_sent:
                continue
            # Positions computed before (a recompute after preemption) are not added twice.
            have = len(req.prompt_logprobs)
            if start <= have:
                req.prompt_logprobs.extend(entries[have - start :])
        outputs = []
        for rid, token in sampled.items():
            req = self.requests.get(rid)
            if req is None or req.status != RequestStatus.RUNNING:
                continue  # aborted or preempted while the step ran
            req.num_output_placeholders -= 1
            req.append_token(token)
            status = self._check_stop(req, token)
            lp = [logprobs[rid]] if logprobs and rid in logprobs else None
            out = EngineCoreOutput(rid, [token], lp, num_cached_tokens=req.num_cached_tokens)
            if req.sampling_params.prompt_logprobs is not None and not req.prompt_logprobs_sent:
                out.prompt_logprobs = [None, *req.prompt_logprobs]
                req.prompt_logprobs_sent = True
                req.prompt_logprobs = []
            if status is not None:
                self.running.remove(req)
                self._finish(req, status)
                out.finish_reason = status.value
                out.stop_reason = req.stop_reason
            outputs.append(out)
        return outputs

    def _check_stop(self, req: Request, token: int) -> RequestStatus | None:
        sp = req.sampling_params
        if req.num_output_tokens >= sp.min_tokens:
            if token == req.eos_token_id and not sp.ignore_eos:
                return RequestStatus.FINISHED_STOPPED
            if token in sp.stop_token_ids:
                req.stop_reason = token
                return RequestStatus.FINISHED_STOPPED
        if req.num_output_tokens >= req.max_tokens or req.num_tokens >= self.max_model_len:
            return RequestStatus.FINISHED_LENGTH
        return None
