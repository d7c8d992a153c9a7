"""Opening connections to the backend: a few at a time, and timed so that a gateway
whose own event loop is late is not taken for a backend that is slow to accept.

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

At most ``OPENING`` connections are being opened at once; a request waits for its
turn to open one (or for a pooled connection) under the pool's timeout, not the
connect timeout, so that a burst of a thousand new streams does not flood the
backend's listen queue, and no connect's time is spent waiting behind the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

import aiohttp
import httpcore

T = TypeVar("T")

OPENING = 64
"""The most connections to one backend being opened at the same time."""
TURNS = 16
"""Turns of the event loop a connect is given after its deadline."""


class ConnectGate:
    """How many connections are being opened at once, and each one's deadline."""

    def __init__(self, timeout_s: float, opening: int = OPENING) -> None:
        self.timeout_s = timeout_s
        self.opening = opening
        self._slots: asyncio.Semaphore | None = None  # made in the loop that uses it

    async def open(self, connecting: Coroutine[Any, Any, T]) -> T:
        """``connecting``'s result once a slot is free and it completes; TimeoutError
        if it has not completed by the deadline and the turns after it."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.opening)
        try:
            await self._slots.acquire()
        except BaseException:
            connecting.close()  # cancelled while it waited for a slot: never began
            raise
        try:
            return await _within(connecting, self.timeout_s)
        finally:
            self._slots.release()


async def _within(connecting: Coroutine[Any, Any, T], timeout_s: float) -> T:
    """Await ``connecting`` in this task; at the deadline, count ``TURNS`` turns of the
    loop (a callback that schedules itself again) before cancelling it, as
    ``asyncio.timeout`` would at once."""
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


class GatedConnector(aiohttp.TCPConnector):
    """aiohttp's pool, opening its new connections through a ``ConnectGate`` (aiohttp's
    own connect timer is left unset: the gate times the connect)."""

    def __init__(self, gate: ConnectGate, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._gate = gate

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        return await self._gate.open(super()._create_connection(req, traces, timeout))


class GatedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, opening its TCP connections through a ``ConnectGate``."""

    def __init__(self, gate: ConnectGate, inner: httpcore.AsyncNetworkBackend) -> None:
        self._gate = gate
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
            return await self._gate.open(connecting)
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
