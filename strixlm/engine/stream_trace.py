"""Per-request timing of streamed responses, to find where a loaded server holds tokens.

Off unless STRIXLM_STREAM_TRACE names a file (read at import); when off, every hook is one
`is None` test. When on, each request appends one JSON line to the file as its response
ends, with time.monotonic() stamps:
- arrival: the handler queued it with the engine (ServingBase.start);
- routed_first / routed_last / routed: the API process routed its first and last engine
  output to the request's queue, and how many outputs (AsyncEngineClient._dispatch);
- body_first / body_last / bodies: the HTTP response took its first and last body chunk
  from the handler, and how many chunks;
- sent_last: the response asked for the chunk after the last one, so the last write returned.

time.monotonic() reads CLOCK_MONOTONIC on Linux, one clock for every process of a machine,
so `strixlm bench serve`'s per-request t_start / t_first / t_last (same clock) line up with
these (benchmarks/gpu/stream_trace_join.py). A completions call with several prompts routes
under each prompt's id and streams under the call's id; the bench sends one prompt a call.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass


@dataclass
class RequestTimes:
    id: str
    arrival: float | None = None
    routed_first: float | None = None
    routed_last: float | None = None
    routed: int = 0
    body_first: float | None = None
    body_last: float | None = None
    bodies: int = 0
    sent_last: float | None = None
    streamed: bool = False


class StreamTrace:
    def __init__(self, path: str) -> None:
        self.path = path
        self.live: dict[str, RequestTimes] = {}

    def _times(self, rid: str) -> RequestTimes:
        t = self.live.get(rid)
        if t is None:
            t = self.live[rid] = RequestTimes(rid)
        return t

    def arrival(self, rid: str) -> None:
        self._times(rid).arrival = time.monotonic()

    def routed(self, rid: str, now: float) -> None:
        t = self.live.get(rid)
        if t is None:  # not a traced request (its arrival was not recorded)
            return
        if t.routed_first is None:
            t.routed_first = now
        t.routed_last = now
        t.routed += 1

    async def body(self, rid: str, chunks: AsyncIterator[str]) -> AsyncIterator[str]:
        """chunks unchanged, with the response-side stamps of request rid."""
        t = self._times(rid)
        t.streamed = True
        try:
            async for chunk in chunks:
                now = time.monotonic()
                if t.body_first is None:
                    t.body_first = now
                t.body_last = now
                t.bodies += 1
                yield chunk
            t.sent_last = time.monotonic()
        finally:
            self.finish(rid)

    def handler_done(self, rid: str) -> None:
        """The handler let go of rid: its line now, unless a streamed body writes it later."""
        t = self.live.get(rid)
        if t is not None and not t.streamed:
            self.finish(rid)

    def finish(self, rid: str) -> None:
        t = self.live.pop(rid, None)
        if t is not None:
            with open(self.path, "a") as f:
                f.write(json.dumps(asdict(t)) + "\n")


def from_env() -> StreamTrace | None:
    path = os.environ.get("STRIXLM_STREAM_TRACE")
    return StreamTrace(path) if path else None


TRACE = from_env()
