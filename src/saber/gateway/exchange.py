"""One relayed request, from offer to release, as an ASGI response.

The request runs in its own task next to a watcher of the client's connection.
If the client goes away first, the task is cancelled: a queued request leaves
its queue, a running one has its upstream response closed (which makes vLLM
abort it). Whatever happens, ``Admission.release`` is called from one
``finally``, and it acts only once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

import httpx
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from saber.gateway.access_log import GATEWAY_LOGGER
from saber.gateway.accounting import Record, account
from saber.gateway.admission import Release, Ticket
from saber.gateway.errors import GatewayError, error_body
from saber.gateway.outcomes import Outcome
from saber.gateway.payload import PATHS, Call
from saber.gateway.sse import EventSplitter, StreamMeter
from saber.gateway.state import Gateway
from saber.gateway.upstream import BackendFailure, classify, downstream_headers
from saber.scheduler import Action, Decision, Tier

log = logging.getLogger(GATEWAY_LOGGER)

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_JSON = [(b"content-type", b"application/json")]
_QUEUED = b": queued\n\n"
_DONE = b"data: [DONE]\n\n"


class Downstream:
    """The client's side of the response, remembering how far it got."""

    __slots__ = ("_send", "finished", "started", "status")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.finished = False
        self.status = 0

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.started = True
        self.status = status
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def write(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def end(self, data: bytes = b"") -> None:
        self.finished = True
        await self._send({"type": "http.response.body", "body": data, "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class Exchange(Response):
    """Queues, relays and accounts for one completion request."""

    def __init__(self, gateway: Gateway, call: Call) -> None:
        super().__init__(status_code=200)
        self.gw = gateway
        self.call = call
        self.ticket: Ticket | None = None
        self.outcome: Outcome | None = None
        self._how: Release = "cancel"
        self._released = False
        self.client_gone = False
        self.delivered = False  # the client has had the whole answer
        self.rec = Record()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        out = Downstream(send)
        main = asyncio.ensure_future(self._serve(out))
        watch = asyncio.ensure_future(_disconnected(receive))

        def client_left(_: object) -> None:
            # receive() also reports "disconnect" once the response is complete, and a
            # client may hang up as soon as it has read "data: [DONE]": no cancel then.
            if watch.cancelled() or main.done() or out.finished or self.delivered:
                return
            self.client_gone = True
            main.cancel()

        watch.add_done_callback(client_left)
        try:
            await main
        except asyncio.CancelledError:
            if not self.client_gone:
                raise  # the server is shutting down
        finally:
            watch.cancel()

    # -- the life of one request ------------------------------------------------------

    async def _serve(self, out: Downstream) -> None:
        gw, call = self.gw, self.call
        self.rec.offered = time.perf_counter()
        ticket = self.ticket = gw.admission.submit(
            call.task,
            call.payload.max_tokens,
            streaming=call.payload.stream,
            min_tokens=call.payload.min_tokens,
        )
        try:
            decision = await self._wait(out, ticket)
            self.rec.left_queue = time.perf_counter()
            if decision.action is Action.REJECT:
                assert decision.outcome is not None
                await self._reject(out, decision.outcome)
            else:
                await self._relay(out, ticket, decision)
        except asyncio.CancelledError:
            self.client_gone = True
            raise
        except OSError:  # the client's connection broke while we wrote to it
            self.client_gone = True
        except Exception as exc:
            log.exception("internal error while serving a request")
            self._how = "fail"
            self.outcome = Outcome.INTERNAL_ERROR
            with contextlib.suppress(Exception):
                await self._answer(
                    out,
                    GatewayError(Outcome.INTERNAL_ERROR, f"internal error: {type(exc).__name__}"),
                )
        finally:
            self._release(self._how)
            self.outcome = self._final_outcome(ticket)
            self.rec.status = out.status if out.started else None
            account(self.gw, self.call, ticket, self.outcome, self.rec)

    def _final_outcome(self, ticket: Ticket) -> Outcome:
        if self.outcome is not None:
            return self.outcome
        if self.client_gone:
            running = ticket.admitted_at is not None
            return Outcome.CANCELLED_RUNNING if running else Outcome.CANCELLED_QUEUED
        sched = ticket.outcome  # finished: served or served_demoted
        return sched if sched is not None else Outcome.INTERNAL_ERROR

    def _release(self, how: Release) -> None:
        """Hand the slot back now (the finally repeats it harmlessly)."""
        if self._released or self.ticket is None:
            return
        self._released = True
        self.gw.admission.release(self.ticket, how)

    async def _wait(self, out: Downstream, ticket: Ticket) -> Decision:
        fut = ticket.future
        if fut.done():
            return fut.result()
        if not self.call.payload.stream:
            return await fut
        interval = self.gw.config.queued_comment_interval_s
        await asyncio.wait((fut,), timeout=interval)
        if fut.done():
            return fut.result()
        # Still queued: commit to a 200 stream and keep the client's timers happy.
        await out.start(200, _SSE_HEADERS + self._saber_headers("queued"))
        while not fut.done():
            await out.write(_QUEUED)
            await asyncio.wait((fut,), timeout=interval)
        return fut.result()

    async def _reject(self, out: Downstream, outcome: Outcome) -> None:
        self.outcome = outcome
        retry = self.gw.admission.retry_after_s()
        task = self.call.task.name
        if outcome is Outcome.REJECTED_QUEUE_FULL:
            message = f"the queue for task type {task} is full; retry in about {retry} s"
        else:
            message = (
                f"the request waited past the low-priority queue limit for task type {task}; "
                f"retry in about {retry} s"
            )
        await self._answer(out, GatewayError(outcome, message, headers={"retry-after": str(retry)}))

    async def _relay(self, out: Downstream, ticket: Ticket, decision: Decision) -> None:
        gw, call = self.gw, self.call
        outcome_header = "admitted" if decision.tier is Tier.HIGH else "admitted_demoted"
        request = gw.upstream.request(PATHS[call.endpoint], call.body, call.headers)
        try:
            resp = await gw.upstream.open(request)
        except BackendFailure as failure:
            await self._fail(out, failure)
            return
        try:
            if resp.status_code >= 400:
                await self._pass_error(out, resp)
            elif call.payload.stream and resp.headers.get("content-type", "").startswith(
                "text/event-stream"
            ):
                await self._relay_stream(out, resp, ticket, outcome_header)
            else:
                await self._relay_body(out, resp, outcome_header)
        finally:
            await resp.aclose()

    async def _relay_body(self, out: Downstream, resp: httpx.Response, outcome_header: str) -> None:
        try:
            data = await resp.aread()
        except httpx.HTTPError as exc:
            await self._fail(out, classify(exc, streaming=True))
            return
        self.rec.upstream_done = time.perf_counter()
        self.rec.tokens = _usage_tokens(data)
        self._how = "finish"
        self._release("finish")
        headers = downstream_headers(resp.headers) + self._saber_headers(outcome_header)
        await out.start(resp.status_code, headers)
        await out.end(data)
        self.rec.end = time.perf_counter()

    async def _relay_stream(
        self, out: Downstream, resp: httpx.Response, ticket: Ticket, outcome_header: str
    ) -> None:
        meter = StreamMeter(
            self.call.payload.want_usage, keep_choice_usage=self.call.dialect.usage_on_final_choice
        )
        splitter = EventSplitter()
        if not out.started:
            await out.start(
                resp.status_code,
                downstream_headers(resp.headers) + self._saber_headers(outcome_header),
            )
        else:
            queue_ms = (self.rec.left_queue or 0.0) - self.rec.offered
            await out.write(f": {outcome_header} queue_ms={queue_ms * 1000:.1f}\n\n".encode())
        try:
            async for chunk in resp.aiter_bytes():
                events = splitter.feed(chunk)
                if not events:
                    continue
                parts: list[bytes] = []
                for event in events:
                    forwarded = meter.process(event)
                    if forwarded is not None:
                        parts.append(forwarded)
                        parts.append(b"\n\n")
                if self.rec.first_token is None and meter.first_token:
                    self.rec.first_token = time.perf_counter()
                ticket.tokens_out = meter.chunks
                if parts:
                    await out.write(b"".join(parts))
                if meter.done:
                    # The client has everything; if it hangs up now, that is no cancel.
                    self.delivered = True
            rest = splitter.flush()
            if rest and (forwarded := meter.process(rest)) is not None:
                await out.write(forwarded + b"\n\n")
        except httpx.HTTPError as exc:
            self.rec.tokens = meter.tokens
            await self._fail(out, classify(exc, streaming=True))
            return
        self.rec.upstream_done = time.perf_counter()
        self.rec.tokens = meter.tokens
        if meter.error is not None:
            self.outcome = Outcome.BACKEND_ERROR
            self.rec.error = _message(meter.error)
            self.gw.metrics.backend_errors.labels("stream_error").inc()
            self._how = "fail"
        else:
            self._how = "finish"
        self._release(self._how)
        # llama.cpp ends a stream after an error event without [DONE]; vLLM sends it.
        await out.end(_DONE if meter.error is not None and not meter.done else b"")
        self.rec.end = time.perf_counter()

    async def _pass_error(self, out: Downstream, resp: httpx.Response) -> None:
        """A 4xx passes through as the backend sent it; a 503 (llama.cpp still loading
        its model) stays a 503 with Retry-After; any other 5xx becomes a 502."""
        try:
            data = await resp.aread()
        except httpx.HTTPError as exc:
            await self._fail(out, classify(exc, streaming=True))
            return
        status = resp.status_code
        client_error = status < 500
        self.gw.metrics.backend_errors.labels("status_4xx" if client_error else "status_5xx").inc()
        self._how = "fail"
        self._release("fail")
        unavailable = status == 503
        if client_error:
            self.outcome = Outcome.BACKEND_REJECTED
        elif unavailable:
            self.outcome = Outcome.BACKEND_UNAVAILABLE
        else:
            self.outcome = Outcome.BACKEND_ERROR
        self.rec.error = f"backend answered {status}"
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        if client_error and isinstance(parsed, dict):
            body = data
        else:
            detail = _message(
                parsed.get("error", parsed) if isinstance(parsed, dict) else data[:500]
            )
            message = f"the backend answered {status}: {detail}"
            status = status if client_error or unavailable else 502
            code = self.outcome.value if unavailable else "backend_error"
            body = json.dumps(error_body(message, status=status, code=code)).encode()
        extra = [(b"retry-after", _retry_after(resp))] if unavailable else None
        await self._send_whole(out, status, body, self.outcome.value, extra)

    async def _fail(self, out: Downstream, failure: BackendFailure) -> None:
        self.gw.metrics.backend_errors.labels(failure.kind).inc()
        self._how = "fail"
        self._release("fail")
        self.rec.error = failure.message
        headers = {"retry-after": "1"} if failure.outcome is Outcome.BACKEND_UNAVAILABLE else {}
        await self._answer(out, GatewayError(failure.outcome, failure.message, headers=headers))

    async def _answer(self, out: Downstream, err: GatewayError) -> None:
        """An answer from the gateway itself, as an OpenAI-style error."""
        self.outcome = err.outcome
        headers = [(k.encode(), v.encode()) for k, v in err.headers.items()]
        body = json.dumps(err.body()).encode()
        await self._send_whole(out, err.status, body, err.outcome.value, headers)

    async def _send_whole(
        self,
        out: Downstream,
        status: int,
        body: bytes,
        outcome_header: str,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        """A whole JSON answer; or, if a stream has begun (committed while it was
        queued, or broken mid-way), its last event, then ``[DONE]``."""
        if out.started:
            await out.end(b"data: " + _one_line(body) + b"\n\n" + _DONE)
        else:
            await out.start(status, _JSON + self._saber_headers(outcome_header) + (extra or []))
            await out.end(body)
        self.rec.end = time.perf_counter()

    def _saber_headers(self, outcome: str) -> list[tuple[bytes, bytes]]:
        waited = (self.rec.left_queue or time.perf_counter()) - self.rec.offered
        return [
            (b"x-saber-task", self.call.task.name.encode()),
            (b"x-saber-queue-ms", f"{waited * 1000:.1f}".encode()),
            (b"x-saber-outcome", outcome.encode()),
        ]


def _retry_after(resp: httpx.Response) -> bytes:
    """The backend's Retry-After if it gave whole seconds, else 1."""
    value = resp.headers.get("retry-after", "").strip()
    return value.encode() if value.isdigit() and len(value) <= 4 else b"1"


def _one_line(body: bytes) -> bytes:
    """JSON fit for one SSE data line."""
    if b"\n" not in body and b"\r" not in body:
        return body
    try:
        return json.dumps(json.loads(body), separators=(",", ":")).encode()
    except ValueError:
        return body.replace(b"\r", b" ").replace(b"\n", b" ")


def _usage_tokens(data: bytes) -> int:
    try:
        usage = json.loads(data).get("usage") or {}
        tokens = usage.get("completion_tokens")
    except (ValueError, AttributeError):
        return 0
    return tokens if isinstance(tokens, int) else 0


def _message(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    if isinstance(error, bytes):
        return error.decode("utf-8", "replace")
    return str(error)
