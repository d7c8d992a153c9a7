"""A limit on requests at the backend for routes the scheduler does not admit."""

from __future__ import annotations

import asyncio

from saber.gateway.errors import GatewayError
from saber.scheduler import Outcome


class PassthroughGate:
    """At most ``limit`` relayed at once; up to ``queue_cap`` more wait, in order."""

    def __init__(self, limit: int, queue_cap: int) -> None:
        self.limit = limit
        self.queue_cap = queue_cap
        self.in_flight = 0
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def enter(self) -> None:
        """A place, once one is free; GatewayError (429) if too many already wait."""
        if self.in_flight < self.limit and not self._waiters:
            self.in_flight += 1
            return
        if len(self._waiters) >= self.queue_cap:
            raise GatewayError(
                Outcome.REJECTED_QUEUE_FULL,
                f"{self.queue_cap} requests already wait for one of the {self.limit} places of "
                "the backend's other routes (passthrough.max_concurrency); retry in about 1 s",
                code="passthrough_queue_full",
                headers={"retry-after": "1"},
            )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # leave() handed its place over: in_flight already counts this one
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.done() and not waiter.cancelled():
                self.leave()  # handed a place just as it went away: pass it on
            raise

    def leave(self) -> None:
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)  # the place goes straight to the next in line
                return
        self.in_flight -= 1
