"""The API process's engine client routes engine messages that queued up as one (CPU)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from strixlm.config import EngineConfig, ModelConfig
from strixlm.core.scheduler import SchedulerStats
from strixlm.engine import client as client_mod
from strixlm.engine.client import AsyncEngineClient
from strixlm.engine.core import StepStats
from strixlm.engine.model_info import load_model_info
from strixlm.engine.request import EngineCoreOutput, SamplingParams

CONFIG = Path(__file__).resolve().parents[1] / "strixlm" / "benchmarks" / "configs" / "qwen3-0.6b"


class _Inbox(list):
    def put(self, msg) -> None:
        self.append(msg)


def _stats(running: int, gen_tokens: int, time: float = 0.0) -> StepStats:
    return StepStats(SchedulerStats(running, 0, 0.1, 0, 0, 0), 0, gen_tokens, 100, time)


async def _route(coalesce: bool) -> tuple[list, list, AsyncEngineClient]:
    config = EngineConfig(ModelConfig(str(CONFIG), load_format="dummy"), device="cpu")
    client = AsyncEngineClient(config, load_model_info(config.model))
    client.in_q = _Inbox()
    client._loop = asyncio.get_running_loop()
    seen = []
    client.add_listener(lambda ro, now, step_times: seen.append((ro, step_times)))
    gen = client.generate([11, 12, 13], SamplingParams(max_tokens=4, temperature=0.0), "r")
    first = asyncio.ensure_future(anext(gen))
    await asyncio.sleep(0)  # generate() queues the request with the engine
    ((kind, reqs),) = client.in_q
    assert kind == "add"
    child = reqs[0].request_id
    # Three steps posted before the loop gets to route any (as a busy loop sees them).
    for tok in (5, 6, 7):
        client._post(("outputs", [EngineCoreOutput(child, [tok])], _stats(1, 1, float(tok))))
    got = [await first]
    last = EngineCoreOutput(child, [8], finish_reason="length")
    client._post(("outputs", [last], _stats(0, 1, 8.0)))
    async for ro in gen:
        got.append(ro)
    return seen, got, client


@pytest.mark.parametrize("coalesce", [True, False])
def test_queued_steps_reach_a_request_as_one_output(monkeypatch, coalesce):
    monkeypatch.setattr(client_mod, "COALESCE", coalesce)
    seen, got, client = asyncio.run(_route(coalesce))
    # Routed: one output for the three queued steps when coalescing, else one each; the
    # listeners get each step's engine time either way.
    assert [ro.outputs[0].token_ids for ro, _ in seen] == (
        [[5, 6, 7], [8]] if coalesce else [[5], [6], [7], [8]]
    )
    assert [t for _, times in seen for t in times] == [5.0, 6.0, 7.0, 8.0]
    # Either way the request gets every token in order, and the counters every step.
    assert [t for ro in got for t in ro.outputs[0].token_ids] == [5, 6, 7, 8]
    assert got[-1].finished and got[-1].outputs[0].finish_reason == "length"
    assert client.total_generation_tokens == 4
    assert client.stats.scheduler.num_running == 0


def test_an_engine_error_after_queued_outputs_routes_them_first(monkeypatch):
    async def run():
        config = EngineConfig(ModelConfig(str(CONFIG), load_format="dummy"), device="cpu")
        client = AsyncEngineClient(config, load_model_info(config.model))
        client.in_q = _Inbox()
        client._loop = asyncio.get_running_loop()
        seen = []
        client.add_listener(lambda ro, now, times: seen.append(ro.outputs[0].token_ids))
        gen = client.generate([11, 12], SamplingParams(max_tokens=4), "r")
        first = asyncio.ensure_future(anext(gen))
        await asyncio.sleep(0)
        child = client.in_q[0][1][0].request_id
        client._post(("outputs", [EngineCoreOutput(child, [5])], _stats(1, 1)))
        client._post(("error", "boom"))
        with pytest.raises(client_mod.EngineDeadError, match="boom"):
            await first
        assert seen == [[5]] and client.dead and client.total_generation_tokens == 1

    monkeypatch.setattr(client_mod, "COALESCE", True)
    asyncio.run(run())
