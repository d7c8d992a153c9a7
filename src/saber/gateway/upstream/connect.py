"""Opening connections to the backend, timed so that a gateway whose own event loop is
late is not taken for a backend that is slow to accept.

A connect is a chain of several turns of the event loop (the socket's connect, then
the transport, then the protocol). The timer that ends it runs first in the turn
where it is due (libuv runs its timers before it polls for I/O), so on a loop busy
with a burst of arrivals a connect that the kernel completed at once could time out
after ``connect_timeout_s`` without the loop ever having looked at it: the backend
took the connection, and the gateway answered 503. So when the deadline passes, the
connect is given ``TURNS`` more turns of the loop, each with its poll for I/O, before
it counts as timed out: on a loop that keeps up these take microseconds, and a
backend that does not accept still fails at the deadline. A refused or unreachable
backend fails at once, as the kernel says so, without any timer.

How many connections are open, or being opened, is the pool's limit
(``backend.max_connections``). A tighter bound on those being opened at once was
tried and not kept: with 64 or 256 at a time, a burst of 1,024 new streams reached
saber-sim in waves, and the gateway's p99 time to first token grew from 5.7 s to
25-41 s (bench/relay.py, 1,024 streams).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

import aiohttp
import httpcore

T = TypeVar("T")

TURNS = 16
"""Turns of the event loop a connect is given after its deadline."""


async def within(connecting: Coroutine[Any, Any, T], timeout_s: float) -> T:
    """``connecting``'s result, awaited in this task; TimeoutError if it has not
    completed ``timeout_s`` in, and ``TURNS`` turns of the loop after that (counted by a
    callback that schedules itself again), where ``asyncio.timeout`` would cancel at
    once."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    state = {"over": False, "expired": False}

    def countdown(turns: int) -> None:
        if state["over"]:
            return
        if turns > 0:
            loop.call_soon(countdown, turns - 1)  # runs in the loop's next turn
            return
        state["expired"] = True
        task.cancel()

    timer = loop.call_at(loop.time() + timeout_s, countdown, TURNS)
    try:
        return await connecting
    except asyncio.CancelledError:
        if state["expired"] and task.uncancel() == 0:  # our cancel, not the caller's
            raise TimeoutError("the backend did not accept the connection in time") from None
        raise
    finally:
        state["over"] = True
        timer.cancel()


class TimedConnector(aiohttp.TCPConnector):
    """aiohttp's pool, its new connections timed by ``within`` (aiohttp's own connect
    timer is left unset)."""

    def __init__(self, connect_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._connect_timeout_s = connect_timeout_s

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        connecting = super()._create_connection(req, traces, timeout)
        return await within(connecting, self._connect_timeout_s)


class TimedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, its TCP connections timed by ``within``."""

    def __init__(self, connect_timeout_s: float, inner: httpcore.AsyncNetworkBackend) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        connecting = self._inner.connect_tcp(host, port, None, local_address, socket_options)
        try:
            return await within(connecting, self._connect_timeout_s)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:  # pragma: no cover (the gateway dials TCP)
        return await self._inner.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
