"""EngineCore: schedule -> execute -> update, over token ids only (no text)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from strixlm.config import EngineConfig
from strixlm.core.kv_cache_manager import KVCacheManager
from strixlm.core.scheduler import Scheduler, SchedulerOutput, SchedulerStats
from strixlm.engine.model_info import ModelInfo
from strixlm.engine.request import EngineCoreOutput, Request, RequestStatus
from strixlm.engine.step_trace import StepRecord, StepTracer
from strixlm.kernels import variant_watch
from strixlm.worker.model_runner import ModelRunner
from strixlm.worker.step_result import StepHandle

logger = logging.getLogger(__name__)


@dataclass
class StepStats:
    scheduler: SchedulerStats
    num_prompt_tokens: int  # prefill tokens computed this step
    num_generation_tokens: int  # tokens sampled this step
    num_blocks: int
    # time.monotonic() when the step's tokens reached the host (system-wide on one machine):
    # the API process's inter-token latency metric spaces each step's tokens by it, not by
    # when its busy event loop got around to routing them.
    time: float


class EngineCore:
    def __init__(self, config: EngineConfig, info: ModelInfo) -> None:
        self.config = config
        self.info = info
        t0 = time.perf_counter()
        watching = (
            variant_watch.ENABLED and config.device.startswith("cuda") and variant_watch.install()
        )
        if watching:
            variant_watch.WATCH.start()
        self.runner = ModelRunner(config, info.hf_config, info.folder, info.max_model_len)
        num_blocks = self.runner.determine_num_blocks()
        self.runner.init_kv_cache(num_blocks)
        self.runner.capture_cuda_graphs()
        self.runner.warmup_kernels()
        bs = config.cache.block_size
        if (num_blocks - 1) * bs < info.max_model_len:
            logger.warning(
                "KV cache holds %d tokens, less than max_model_len %d: long requests will wait",
                (num_blocks - 1) * bs,
                info.max_model_len,
            )
        self.kv_manager = KVCacheManager(
            self.runner.kv_cache_groups(), num_blocks, bs, config.cache.enable_prefix_caching
        )
        self.scheduler = Scheduler(config.scheduler, self.kv_manager, info.max_model_len)
        self.num_blocks = num_blocks
        self._in_flight: tuple[SchedulerOutput, StepHandle] | None = None
        self.tracer = StepTracer.from_env()
        if watching:
            variant_watch.WATCH.mark_ready()
        logger.info(
            "engine ready in %.1fs: %s on %s (%s), %d KV blocks of %d tokens (%.2f GiB)",
            time.perf_counter() - t0,
            info.name,
            config.device,
            config.torch_dtype,
            num_blocks,
            bs,
            num_blocks * self.runner.bytes_per_block() / 2**30,
        )

    def add_request(self, request: Request) -> None:
        self.scheduler.add_request(request)

    def abort_requests(self, request_ids: list[str]) -> None:
        self.scheduler.finish_requests(request_ids, RequestStatus.FINISHED_ABORTED)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or self._in_flight is not None

    def stats(self, num_prompt_tokens: int, num_generation_tokens: int) -> StepStats:
        """The scheduler's and cache's state now, with this step's token counts, timed."""
        return StepStats(
            self.scheduler.stats(),
            num_prompt_tokens,
            num_generation_tokens,
            self.num_blocks,
            time.monotonic(),
        )

    def step(self) -> tuple[list[EngineCoreOutput], StepStats]:
        """Plan and launch a step, then take in the results of the previous one (async
        scheduling: the host plans step N+1 while the GPU runs step N), or of this one."""
        t0 = time.perf_counter()
        sched = self.scheduler.schedule()
        t1 = time.perf_counter()
        handle = self.runner.execute(sched)
        t2 = time.perf_counter()
        launched = sched
        if self.config.async_scheduling:
            done, self._in_flight = self._in_flight, None
            if not sched.is_empty:
                self._in_flight = (sched, handle)
            if done is None:
                return [], self.stats(0, 0)
            sched, handle = done
        sampled, logprobs = handle.result()
        prompt_lps = handle.prompt_logprobs()
        t3 = time.perf_counter()
        outputs = self.scheduler.update_from_output(sched, sampled, logprobs, prompt_lps)
        stats = self.stats(sched.num_prompt_tokens, len(sampled))
        if self.tracer is not None:
            t4 = time.perf_counter()
            self.tracer.add(
                StepRecord(
                    t0,
                    (t1 - t0) * 1e3,
                    (t2 - t1) * 1e3,
                    (t3 - t2) * 1e3,
                    (t4 - t3) * 1e3,
                    launched.total_num_scheduled_tokens,
                    len(launched.num_scheduled_tokens),
                    len(sampled),
                )
            )
        return outputs, stats
