"""The server's periodic stats line: one a busy interval, one idle line after, then quiet."""

from __future__ import annotations

import logging
from pathlib import Path

from strixlm.config import EngineConfig, ModelConfig
from strixlm.core.scheduler import SchedulerStats
from strixlm.engine.client import AsyncEngineClient
from strixlm.engine.core import StepStats
from strixlm.engine.model_info import load_model_info

CONFIG = Path(__file__).resolve().parents[1] / "strixlm" / "benchmarks" / "configs" / "qwen3-0.6b"


def _levels(caplog, client: AsyncEngineClient, intervals) -> list[str]:
    """Run log_stats once per (running, generated tokens) interval; the level of each line."""
    levels = []
    for running, tokens in intervals:
        if client.stats is not None or running or tokens:  # None until the first step
            client.stats = StepStats(SchedulerStats(running, 0, 0.25, 0, 0, 0), 0, tokens, 100, 0.0)
        client.interval.generation_tokens += tokens
        caplog.clear()
        client.log_stats()
        (record,) = [r for r in caplog.records if "Avg prompt throughput" in r.getMessage()]
        levels.append(record.levelname)
    return levels


def test_idle_intervals_log_once_then_go_quiet(caplog):
    caplog.set_level(logging.DEBUG, logger="strixlm.engine.client")
    config = EngineConfig(ModelConfig(str(CONFIG), load_format="dummy"), device="cpu")
    client = AsyncEngineClient(config, load_model_info(config.model))
    # Idle from start-up, busy (tokens, then a running request that made none this
    # interval), idle twice, busy again.
    intervals = [(0, 0), (0, 0), (2, 40), (1, 0), (0, 0), (0, 0), (0, 0), (1, 3)]
    assert _levels(caplog, client, intervals) == [
        "DEBUG", "DEBUG", "INFO", "INFO", "INFO", "DEBUG", "DEBUG", "INFO",
    ]  # fmt: skip
