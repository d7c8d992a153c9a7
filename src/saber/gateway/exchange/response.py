"""One completion request's response: offered, queued, relayed, finalized, answered.

The work runs in its own task next to a watcher of the client's connection. If
the client goes away first, the task is cancelled: a queued request leaves its
queue, a running one has its upstream response closed (which makes vLLM abort
it), and the flow is finalized as cancelled. Otherwise the relay (or the
scheduler's REJECT, or a failure) decides the outcome, the flow is finalized with
it, and only then does the client get the last bytes of its answer. Any exception
on the way is finalized as ``internal_error``: a 500, or on a stream already
begun an error event and ``data: [DONE]``. The drain (``drain``) interrupts an
exchange the same way, with an outcome of its own, and the client is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from saber.gateway.admission.flow import Flow
from saber.gateway.assembly import Gateway
from saber.gateway.control.drain import drain_timeout_error, draining_error
from saber.gateway.edge.payload import PATHS
from saber.gateway.errors import GatewayError, internal
from saber.gateway.exchange.downstream import (
    QUEUED,
    SSE_HEADERS,
    Downstream,
    Ending,
    error_ending,
    saber_headers,
)
from saber.gateway.exchange.relay import failed, relay
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.gateway.upstream.client import BackendFailure
from saber.scheduler import Action, Decision, Outcome, Tier

log = logging.getLogger(GATEWAY_LOGGER)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class Exchange(Response):
    """Queues, relays and finalizes one completion request."""

    def __init__(self, gw: Gateway, flow: Flow) -> None:
        super().__init__(status_code=200)
        self.gw = gw
        self.flow = flow
        self._main: asyncio.Future[None] | None = None
        self._started = False
        self._interrupt: Outcome | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        out = Downstream(send, completions=self.flow.endpoint == "completions")
        main = self._main = asyncio.ensure_future(self._serve(out))
        watch = asyncio.ensure_future(_disconnected(receive))

        def client_left(_: object) -> None:
            # receive() also reports "disconnect" once the response is complete.
            if not watch.cancelled() and not main.done() and not out.finished:
                main.cancel()

        watch.add_done_callback(client_left)
        exchanges = self.gw.drain.exchanges
        exchanges.add(self)
        try:
            await main
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise  # the server is shutting down; the client leaving ends here
        finally:
            exchanges.discard(self)
            watch.cancel()

    def interrupt(self, outcome: Outcome, *, only_queued: bool) -> None:
        """End the exchange with ``outcome`` (the drain): one still waiting in its queue,
        or, unless ``only_queued``, one being relayed too. The client is answered."""
        main = self._main
        if main is None or not self._started or main.done() or self.flow.outcome is not None:
            return  # not begun: it sees the drain itself
        if only_queued and self.flow.left_queue is not None:
            return
        if self._interrupt is None:
            self._interrupt = outcome
            main.cancel()

    async def _serve(self, out: Downstream) -> None:
        self._started = True
        try:
            ending = await self._exchange(out)
        except asyncio.CancelledError:
            if self._interrupt is None:
                self._finalize(out, _cancelled())
                raise
            me = asyncio.current_task()
            if me is not None:
                me.uncancel()
            ending = self._interrupted(self._interrupt)
        except OSError:  # the client's connection broke while we wrote to it
            self._finalize(out, _cancelled())
            return
        except Exception as exc:
            log.exception("internal error while serving a request", extra={"id": self.flow.id})
            ending = error_ending(self.flow, internal(exc))
        ending = self._finalize(out, ending)
        with contextlib.suppress(OSError):  # gone at the last moment: it is served
            await out.finish(ending)

    def _interrupted(self, outcome: Outcome) -> Ending:
        if outcome is Outcome.REJECTED_DRAINING:
            return error_ending(self.flow, draining_error())
        err = drain_timeout_error(self.gw.config.drain_timeout_s)
        return error_ending(self.flow, err, tokens=self.flow.tokens)

    def _finalize(self, out: Downstream, ending: Ending) -> Ending:
        """Finalize the flow with ``ending``; the ending to send, which is a 500 if
        finalizing turned the outcome into an internal error."""
        outcome = self.flow.finalize(
            ending.outcome,
            status=out.status if out.started else ending.status,
            committed=out.started,
            tokens=ending.tokens,
            error=ending.error,
            fault=ending.fault,
        )
        if outcome is Outcome.INTERNAL_ERROR and ending.outcome is not outcome:
            message = "internal error: the request could not be released"
            return error_ending(self.flow, GatewayError(outcome, message))
        return ending

    async def _exchange(self, out: Downstream) -> Ending:
        flow, gw = self.flow, self.gw
        if gw.drain.draining:  # it was accepted as the drain began
            return error_ending(flow, draining_error())
        decision = await self._admission(out)
        flow.decided(decision)
        if decision.action is Action.REJECT:
            assert decision.outcome is not None
            return self._rejection(decision.outcome)
        label = "admitted" if decision.tier is Tier.HIGH else "admitted_demoted"
        if out.started:
            await out.write(f": {label} queue_ms={flow.queue_s() * 1000:.1f}\n\n".encode())
        call = flow.call
        assert call is not None
        replica = gw.replicas.of(gw.admission.backend_of(flow.id))
        flow.backend = replica.name
        body = call.body_for(decision.tier, replica.watch.priority.forward)
        request = replica.upstream.request(PATHS[call.endpoint], body, call.headers)
        try:
            async with replica.upstream.open(request) as resp:
                gw.replicas.answered(replica, resp.status_code)
                return await relay(flow, resp, out, label)
        except BackendFailure as failure:
            gw.replicas.failed(replica, failure.kind)
            return failed(flow, failure)

    async def _admission(self, out: Downstream) -> Decision:
        """Offer the request and wait for the scheduler's decision. A stream still
        waiting after ``queued_comment_interval_s`` gets its 200 and ``: queued``
        comments, so that the client does not time out."""
        flow = self.flow
        future = flow.offer()
        if future.done():
            return future.result()
        assert flow.call is not None
        if not flow.call.payload.stream:
            return await future
        interval = self.gw.config.queued_comment_interval_s
        await asyncio.wait((future,), timeout=interval)
        if future.done():
            return future.result()
        await out.start(200, SSE_HEADERS + saber_headers(flow, "queued"))
        while not future.done():
            await out.write(QUEUED)
            await asyncio.wait((future,), timeout=interval)
        return future.result()

    def _rejection(self, outcome: Outcome) -> Ending:
        task = self.flow.task_name
        full = task if outcome is Outcome.REJECTED_QUEUE_FULL else None
        seconds, ms = self.gw.admission.retry_after(full)
        when = f"retry in about {_seconds(ms)}"
        if outcome is Outcome.REJECTED_QUEUE_FULL:
            message = f"the queue for task type {task} is full; {when}"
        else:
            message = (
                f"the request could no longer be answered while still useful for task type "
                f"{task} (useful_s); {when}"
            )
        headers = {"retry-after": str(seconds), "retry-after-ms": str(ms)}
        return error_ending(self.flow, GatewayError(outcome, message, headers=headers))


def _seconds(ms: int) -> str:
    """A wait in words: tenths below 10 s, whole seconds above."""
    return f"{ms / 1000:.1f} s" if ms < 10_000 else f"{round(ms / 1000)} s"


def _cancelled() -> Ending:
    """The client went away; the flow names it by where the request was."""
    return Ending(Outcome.CANCELLED_QUEUED, 499, b"")
