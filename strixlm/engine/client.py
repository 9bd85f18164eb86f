"""AsyncEngineClient: the API process's handle on an engine core running in its own process.

The API process tokenizes, detokenizes and applies stop strings; the engine process only
sees token ids. A reader thread drains the engine's output queue and hands the batches to
the event loop, which routes RequestOutputs to per-request asyncio queues; batches that
arrive while the loop is busy are routed together (_post).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing as mp
import os
import queue
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from strixlm.config import EngineConfig
from strixlm.engine import stream_trace
from strixlm.engine.core import StepStats
from strixlm.engine.model_info import ModelInfo
from strixlm.engine.output_merge import merge_delta_outputs
from strixlm.engine.output_processor import OutputProcessor
from strixlm.engine.processor import InputProcessor
from strixlm.engine.request import RequestOutput, SamplingParams

logger = logging.getLogger(__name__)


class EngineDeadError(RuntimeError):
    pass


@dataclass
class IntervalCounters:
    """Token counts since the last periodic log line."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    since: float = field(default_factory=time.monotonic)


# Route engine messages that queued up for the event loop as one (_post); 0 routes each
# on its own (A/B runs: benchmarks/serve_path_probe.py, serve_where.sh).
COALESCE = os.environ.get("STRIXLM_COALESCE_OUTPUTS", "1") != "0"


def merge_step_stats(a: StepStats, b: StepStats) -> StepStats:
    """Two consecutive steps' stats as one: token counts add, the state is the later's."""
    return StepStats(
        b.scheduler,
        a.num_prompt_tokens + b.num_prompt_tokens,
        a.num_generation_tokens + b.num_generation_tokens,
        b.num_blocks,
        b.time,
    )


class AsyncEngineClient:
    def __init__(self, config: EngineConfig, info: ModelInfo) -> None:
        self.config = config
        self.info = info
        self.processor = InputProcessor(info, config.model.seed)
        self.outputs = OutputProcessor(info.tokenizer)
        self.queues: dict[str, asyncio.Queue] = {}
        self.stats: StepStats | None = None
        self.total_prompt_tokens = 0
        self.total_generation_tokens = 0
        self.interval = IntervalCounters()
        self._last_interval_busy = False
        self.num_blocks = 0
        self.dead: str | None = None
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._log_task: asyncio.Task | None = None
        self._listeners: list = []  # callables(RequestOutput, now) for metrics
        # Engine messages read by the reader thread, not yet routed (_post).
        self._pending: list = []
        self._pending_lock = threading.Lock()
        self._dispatch_scheduled = False

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the engine process and wait until its model and KV cache are ready."""
        ctx = mp.get_context("spawn")
        self.in_q = ctx.Queue()
        self.out_q = ctx.Queue()
        # The engine process does not need the tokenizer.
        core_info = ModelInfo(**{**self.info.__dict__, "tokenizer": None})
        from strixlm.engine.engine_proc import run_engine_core

        self.proc = ctx.Process(
            target=run_engine_core,
            args=(self.config, core_info, self.in_q, self.out_q, logging.getLogger().level),
            daemon=True,
            name="strixlm-engine",
        )
        self.proc.start()
        msg = self.out_q.get()
        if msg[0] == "error":
            self.proc.join(timeout=5)
            raise RuntimeError(f"engine process failed to start:\n{msg[1]}")
        self.num_blocks = msg[1]

    async def attach(self) -> None:
        """Start routing outputs on the running event loop (call once from the server)."""
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=self._reader, name="strixlm-engine-reader", daemon=True).start()
        self._log_task = asyncio.create_task(self._log_loop())

    def shutdown(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is None:
            return
        self.proc = None  # first, so the reader does not report the exit as a crash
        try:
            self.in_q.put(("shutdown", None))
            proc.join(timeout=10)
        finally:
            if proc.is_alive():
                proc.kill()

    # ---- requests ----------------------------------------------------------------------
    def add_listener(self, fn) -> None:
        """fn(ro, now, step_times) for every RequestOutput routed: `now` is when it was
        routed, `step_times` the engine's StepStats.time of each step whose tokens it
        carries, ascending (several when the loop routed queued steps as one)."""
        self._listeners.append(fn)

    async def generate(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        request_id: str | None = None,
        prompt: str | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Yield delta RequestOutputs until the request finishes; aborts it if cancelled."""
        if self.dead:
            raise EngineDeadError(self.dead)
        rid = request_id or f"req-{next(self._ids)}"
        reqs = self.processor.make_requests(rid, prompt_token_ids, params)
        q: asyncio.Queue = asyncio.Queue()
        self.queues[rid] = q
        self.outputs.add_request(
            rid, prompt, prompt_token_ids, params, [r.request_id for r in reqs], kind="delta"
        )
        self.in_q.put(("add", reqs))
        finished = False
        try:
            while not finished:
                item = await q.get()
                # Deltas that queued up while we were busy go out as one.
                while not isinstance(item, Exception) and not item.finished and not q.empty():
                    nxt = q.get_nowait()
                    if isinstance(nxt, Exception):
                        item = nxt
                        break
                    item = merge_delta_outputs(item, nxt)
                if isinstance(item, Exception):
                    raise item
                finished = item.finished
                yield item
        finally:
            self.queues.pop(rid, None)
            if not finished:
                self.abort(rid)

    def abort(self, request_id: str) -> None:
        child_ids = self.outputs.child_ids(request_id)
        self.outputs.abort(request_id)
        if child_ids:
            self.in_q.put(("abort", child_ids))

    # ---- output routing ----------------------------------------------------------------
    def _reader(self) -> None:
        while True:
            try:
                # A timeout, because a killed engine never closes the queue (we hold its
                # write end too): without the liveness check its requests would hang.
                msg = self.out_q.get(timeout=1.0)
            except queue.Empty:
                proc = self.proc
                if proc is None:
                    return  # shut down
                if proc.is_alive():
                    continue
                msg = ("error", f"engine process exited unexpectedly (code {proc.exitcode})")
            except (EOFError, OSError):
                msg = ("error", "engine output queue closed")
            try:
                self._post(msg)
            except RuntimeError:
                return  # the event loop is closed
            if msg[0] == "error":
                return

    def _post(self, msg) -> None:
        """Hand a message to the event loop. One hand-off is pending at a time: messages
        that arrive while the loop is behind join it, and are routed together."""
        if not COALESCE:
            self._loop.call_soon_threadsafe(self._dispatch, msg)
            return
        with self._pending_lock:
            self._pending.append(msg)
            if self._dispatch_scheduled:
                return
            self._dispatch_scheduled = True
        self._loop.call_soon_threadsafe(self._dispatch_pending)

    def _dispatch_pending(self) -> None:
        """Route every message posted since the last call, as one: when the event loop is
        behind the engine, several steps' outputs reach each request as one RequestOutput,
        so the loop's work per step shrinks as it falls behind instead of queueing up."""
        with self._pending_lock:
            msgs, self._pending = self._pending, []
            self._dispatch_scheduled = False
        steps: list[tuple[list, float]] = []  # each step's outputs and its time
        stats: StepStats | None = None
        for msg in msgs:
            if msg[0] == "error":
                if stats is not None:
                    self._route(steps, stats)
                self._dispatch(msg)
                return
            _, outs, st = msg
            steps.append((outs, st.time))
            stats = st if stats is None else merge_step_stats(stats, st)
        if stats is not None:
            self._route(steps, stats)

    def _step_times(self, steps: list[tuple[list, float]]) -> dict[str, list[float]]:
        """Parent request id -> the times of the steps that gave it tokens, one entry a
        step (n > 1 samples of a request share it). Before OutputProcessor.process, which
        forgets the requests that finish."""
        times: dict[str, list[float]] = {}
        for outs, t in steps:
            parents = {self.outputs.parent_id(out.request_id) for out in outs}
            parents.discard(None)
            for pid in parents:
                times.setdefault(pid, []).append(t)
        return times

    def _dispatch(self, msg) -> None:
        """Route one message from the engine process: an error, or one step's outputs."""
        if msg[0] == "error":
            self.dead = f"engine process died: {msg[1]}"
            logger.error(self.dead)
            for q in self.queues.values():
                q.put_nowait(EngineDeadError(self.dead))
            return
        _, core_outputs, stats = msg
        self._route([(core_outputs, stats.time)], stats)

    def _route(self, steps: list[tuple[list, float]], stats: StepStats) -> None:
        """Route the outputs of one or more steps (stats merged over them) to their
        requests, as one RequestOutput a request."""
        step_times = self._step_times(steps) if self._listeners else {}
        core_outputs = [out for outs, _ in steps for out in outs]
        self.stats = stats
        self.total_prompt_tokens += stats.num_prompt_tokens
        self.total_generation_tokens += stats.num_generation_tokens
        self.interval.prompt_tokens += stats.num_prompt_tokens
        self.interval.generation_tokens += stats.num_generation_tokens
        results, to_abort = self.outputs.process(core_outputs)
        if to_abort:
            self.in_q.put(("abort", to_abort))
        now = time.monotonic()
        trace = stream_trace.TRACE
        for ro in results:
            for fn in self._listeners:
                fn(ro, now, step_times.get(ro.request_id, []))
            if trace is not None:
                trace.routed(ro.request_id, now)
            q = self.queues.get(ro.request_id)
            if q is not None:
                q.put_nowait(ro)

    async def _log_loop(self) -> None:
        period = self.config.log_stats_interval_s
        while True:
            await asyncio.sleep(period)
            self.log_stats()

    def log_stats(self) -> None:
        """One line of throughput and cache figures for the interval just ended. An idle
        server logs one idle line after its last busy interval, then goes quiet (DEBUG)
        until work comes back, as vLLM does."""
        now = time.monotonic()
        dt = max(now - self.interval.since, 1e-9)
        s = self.stats
        sched = s.scheduler if s else None
        hit = (
            100.0 * sched.prefix_cache_hits / sched.prefix_cache_queries
            if sched and sched.prefix_cache_queries
            else 0.0
        )
        running = sched.num_running if sched else 0
        waiting = sched.num_waiting if sched else 0
        busy = bool(
            self.interval.prompt_tokens or self.interval.generation_tokens or running or waiting
        )
        level = logging.INFO if busy or self._last_interval_busy else logging.DEBUG
        self._last_interval_busy = busy
        logger.log(
            level,
            "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
            "Running: %d reqs, Waiting: %d reqs, KV cache usage: %.1f%%, "
            "Prefix cache hit rate: %.1f%%",
            self.interval.prompt_tokens / dt,
            self.interval.generation_tokens / dt,
            running,
            waiting,
            100.0 * (sched.kv_cache_usage if sched else 0.0),
            hit,
        )
        self.interval = IntervalCounters()
