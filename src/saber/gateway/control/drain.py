"""Graceful drain, on SIGTERM: nothing is cut at the TCP level, every request is answered.

Once the drain begins:

1. readiness (``/health/ready``) fails at once; liveness stays up;
2. a new completion request is answered ``503 rejected_draining`` with Retry-After,
   and so is every request still queued (a stream committed while it waited gets
   the error as its last event, then ``data: [DONE]``);
3. running requests may finish for ``drain_timeout_s``;
4. those still running then are interrupted: the upstream request is closed (the
   engine aborts it), the flow is finalized as ``drain_timeout``, and the client
   gets an OpenAI error event and ``data: [DONE]`` (a stream), or a 503 with
   Retry-After (a whole answer);
5. when no completion request is left (or ``FINAL_WRITE_S`` after step 4), the
   server is told to exit: it closes its listening socket and its idle
   connections, and the lifespan's shutdown saves the state file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from saber.gateway.errors import GatewayError
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.scheduler import Outcome, Pool

log = logging.getLogger(GATEWAY_LOGGER)

FINAL_WRITE_S = 5.0
"""After the interruptions, how long the last answers may take to be written."""
RETRY_AFTER_S = 1


class Interruptible(Protocol):
    def interrupt(self, outcome: Outcome, *, only_queued: bool) -> None: ...


def draining_error() -> GatewayError:
    return GatewayError(
        Outcome.REJECTED_DRAINING,
        "the gateway is shutting down; retry the request",
        code="rejected_draining",
        headers={"retry-after": str(RETRY_AFTER_S)},
    )


def drain_timeout_error(timeout_s: float) -> GatewayError:
    return GatewayError(
        Outcome.DRAIN_TIMEOUT,
        f"the gateway is shutting down and the request was still running after "
        f"{timeout_s:g} s (drain_timeout_s); retry the request",
        code="drain_timeout",
        headers={"retry-after": str(RETRY_AFTER_S)},
    )


class Drain:
    """The gateway's completion requests in progress, and the drain that ends them."""

    def __init__(self, timeout_s: Callable[[], float], scheduler: Pool) -> None:
        self._timeout_s = timeout_s  # drain_timeout_s as in force when the drain begins
        self._scheduler = scheduler
        self.draining = False
        self.active = 0  # completion requests between arrival and their last byte
        self.exchanges: set[Interruptible] = set()  # those queued or relayed
        self.on_done: Callable[[], None] | None = None
        """Called once the drain is over (the server's exit)."""
        self._idle: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def enter(self) -> None:
        self.active += 1
        if self._idle is not None:
            self._idle.clear()

    def leave(self) -> None:
        self.active -= 1
        if self.active == 0 and self._idle is not None:
            self._idle.set()

    def begin(self) -> None:
        """Start draining (the first SIGTERM; later calls change nothing)."""
        if self.draining:
            return
        self.draining = True
        self._idle = asyncio.Event()
        if self.active == 0:
            self._idle.set()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="saber-drain")

    async def _run(self) -> None:
        timeout = self._timeout_s()
        sched = self._scheduler
        log.warning(
            "draining: refusing new requests, running ones may finish",
            extra={
                "running": sched.load,
                "queued": sched.queued(),
                "drain_timeout_s": timeout,
            },
        )
        for exchange in list(self.exchanges):
            exchange.interrupt(Outcome.REJECTED_DRAINING, only_queued=True)
        interrupted = 0
        if not await self._wait_idle(timeout):
            interrupted = len(self.exchanges)
            for exchange in list(self.exchanges):
                exchange.interrupt(Outcome.DRAIN_TIMEOUT, only_queued=False)
            await self._wait_idle(FINAL_WRITE_S)
        log.warning(
            "drained",
            extra={"interrupted": interrupted, "left": self.active},
        )
        if self.on_done is not None:
            self.on_done()

    async def _wait_idle(self, timeout: float) -> bool:
        assert self._idle is not None
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True
