"""STRIXLM_STREAM_TRACE's per-request stamps (strixlm/engine/stream_trace.py), in process."""

from __future__ import annotations

import asyncio
import json

from strixlm.engine.stream_trace import StreamTrace


async def _chunks(n: int):
    for i in range(n):
        await asyncio.sleep(0)
        yield f"data: {i}\n\n"


def test_a_streamed_request_gets_one_line_with_ordered_stamps(tmp_path):
    path = tmp_path / "t.jsonl"
    tr = StreamTrace(str(path))
    tr.arrival("r1")
    for now in (10.0, 11.0, 12.0):
        tr.routed("r1", now)
    tr.routed("other", 13.0)  # no arrival: not traced

    async def consume():
        got = [c async for c in tr.body("r1", _chunks(3))]
        tr.handler_done("r1")  # a streamed body writes its own line
        return got

    got = asyncio.run(consume())
    assert got == ["data: 0\n\n", "data: 1\n\n", "data: 2\n\n"]  # passed through unchanged
    (line,) = [json.loads(x) for x in path.read_text().splitlines()]
    assert line["id"] == "r1" and line["routed"] == 3 and line["bodies"] == 3
    assert (line["routed_first"], line["routed_last"]) == (10.0, 12.0)
    assert line["arrival"] <= line["body_first"] <= line["body_last"] <= line["sent_last"]
    assert line["streamed"] and not tr.live


def test_a_request_without_a_streamed_body_is_written_when_its_handler_lets_go(tmp_path):
    path = tmp_path / "t.jsonl"
    tr = StreamTrace(str(path))
    tr.arrival("r2")
    tr.routed("r2", 5.0)
    tr.handler_done("r2")
    tr.handler_done("r2")  # twice: still one line
    (line,) = [json.loads(x) for x in path.read_text().splitlines()]
    assert line["routed"] == 1 and line["bodies"] == 0 and line["sent_last"] is None


def test_a_client_that_leaves_mid_stream_still_gets_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    tr = StreamTrace(str(path))
    tr.arrival("r3")

    async def leave_early():
        body = tr.body("r3", _chunks(5))
        assert await anext(body) == "data: 0\n\n"
        await body.aclose()  # what the server does when the client disconnects

    asyncio.run(leave_early())
    (line,) = [json.loads(x) for x in path.read_text().splitlines()]
    assert line["bodies"] == 1 and line["sent_last"] is None
