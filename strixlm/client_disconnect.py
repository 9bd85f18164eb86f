"""Cancelling a request's work when its HTTP client goes away (the server and the router).

A non-streaming handler only answers at the end, so nothing tells it that its client left:
it would keep generating (or keep an upstream request generating) for nobody, holding batch
slots and KV blocks. Once the handler has read the body, what is left to receive from the
ASGI server is the disconnect, so a watcher awaiting it can cancel the work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

T = TypeVar("T")


async def wait_disconnect(raw: Request) -> None:
    """Returns when the client goes away (the body must have been read already)."""
    while True:
        message = await raw.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(raw: Request, work: Awaitable[T]) -> T | None:
    """work's result, or None if the client left first: work is then cancelled."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(wait_disconnect(raw))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return None if task.cancelled() else task.result()
