"""Noticing that a client left, even while there is nothing to send it.

A request that waits in the engine's queue, or a stalled one, writes nothing, so
a failed write cannot reveal the disconnect. Both helpers here watch the ASGI
receive channel for ``http.disconnect`` next to the work, and cancel the work
when it comes; the caller then aborts the engine requests, as vLLM does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before the response was ready."""


async def wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(work: Awaitable[T], receive: Receive) -> T:
    """``await work``, or raise ClientGone (cancelling it) if the client leaves first."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, watch):
            if not t.done():
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t
    if task.cancelled() or not task.done():
        raise ClientGone
    return task.result()


class EventStreamResponse(Response):
    """``text/event-stream`` that stops, and calls ``on_close``, when the client leaves."""

    media_type = "text/event-stream"

    def __init__(self, body: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        self.status_code = 200
        self.background = None
        self._body = body
        self._on_close = on_close
        self.init_headers({"cache-control": "no-cache"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await until_disconnect(self._pump(send), receive)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (ClientGone, OSError):
            pass
        finally:
            self._on_close()
            aclose = getattr(self._body, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    async def _pump(self, send: Send) -> None:
        async for chunk in self._body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
