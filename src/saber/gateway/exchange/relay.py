"""The byte relay: an opened upstream response, copied to the client.

A stream passes event by event (events that arrive together go out in one write),
its tokens counted as they pass (``StreamMeter``) and reported to the flow each
time the count changes. A whole answer is read, then held. The relay never ends
the client's response: it returns an ``Ending`` that says what happened and holds
the last bytes (a stream's ``data: [DONE]``, a whole body, an error), which the
exchange sends once the flow is finalized. So the backend's slot is free before
a slow client has read its answer, and a client never has ``[DONE]`` before its
request has left the scheduler.
"""

from __future__ import annotations

import email.utils
import json
from typing import Any

import httpx

from saber import wire
from saber.gateway.admission.flow import Flow
from saber.gateway.errors import GatewayError
from saber.gateway.exchange.downstream import (
    JSON_HEADERS,
    Downstream,
    Ending,
    error_ending,
    saber_headers,
)
from saber.gateway.exchange.meter import StreamMeter
from saber.gateway.upstream.client import BackendFailure, classify, downstream_headers
from saber.scheduler import Outcome


async def relay(flow: Flow, resp: httpx.Response, out: Downstream, label: str) -> Ending:
    """Relay ``resp`` to ``out``; ``label`` is the ``x-saber-outcome`` of a success."""
    assert flow.call is not None
    if resp.status_code >= 400:
        return await _backend_error(flow, resp)
    sse = resp.headers.get("content-type", "").startswith("text/event-stream")
    if flow.call.payload.stream and sse:
        return await _stream(flow, resp, out, label)
    return await _whole(flow, resp, label)


def failed(flow: Flow, failure: BackendFailure, tokens: int | None = None) -> Ending:
    """The backend could not be reached, or broke off: answered with the failure's outcome."""
    unavailable = failure.outcome is Outcome.BACKEND_UNAVAILABLE
    err = GatewayError(
        failure.outcome, failure.message, headers={"retry-after": "1"} if unavailable else None
    )
    return error_ending(flow, err, tokens=tokens, fault=failure.kind)


async def _whole(flow: Flow, resp: httpx.Response, label: str) -> Ending:
    try:
        data = await resp.aread()
    except httpx.HTTPError as exc:
        return failed(flow, classify(exc, streaming=True))
    headers = downstream_headers(resp.headers) + saber_headers(flow, label)
    body = _json(data)
    flow.prompt_tokens = wire.prompt_tokens(body)
    tokens = wire.completion_tokens(body) or 0
    return Ending(Outcome.SERVED, resp.status_code, data, headers, tokens=tokens)


async def _stream(flow: Flow, resp: httpx.Response, out: Downstream, label: str) -> Ending:
    assert flow.call is not None
    meter = StreamMeter(
        flow.call.payload.want_usage, keep_choice_usage=flow.call.dialect.usage_on_final_choice
    )
    splitter = wire.EventSplitter()
    if not out.started:
        await out.start(
            resp.status_code, downstream_headers(resp.headers) + saber_headers(flow, label)
        )
    flow.progress(0)
    try:
        async for chunk in resp.aiter_bytes():
            parts = [_forward(meter, event) for event in splitter.feed(chunk)]
            if meter.chunks != flow.tokens:
                flow.progress(meter.chunks)
            if any(parts):
                await out.write(b"".join(parts))
        if (rest := splitter.flush()) and (last := _forward(meter, rest)):
            await out.write(last)
    except httpx.HTTPError as exc:
        return failed(flow, classify(exc, streaming=True), tokens=meter.tokens)
    flow.prompt_tokens = meter.prompt_tokens
    # [DONE] was held back: it goes last, after the flow is finalized. llama.cpp ends a
    # stream after an error event without one; vLLM sends it.
    tail = wire.DONE_EVENT if meter.done or meter.error is not None else b""
    if meter.error is not None:
        message = wire.error_message({"error": meter.error})
        return Ending(
            Outcome.BACKEND_ERROR,
            resp.status_code,
            tail,
            tokens=meter.tokens,
            error=message,
            fault="stream_error",
        )
    return Ending(Outcome.SERVED, resp.status_code, tail, tokens=meter.tokens)


def _forward(meter: StreamMeter, event: bytes) -> bytes:
    """What to pass on of one event: itself (maybe rewritten) with its blank line, or
    nothing (the usage chunk nobody asked for, and [DONE], held back)."""
    done = meter.done
    forwarded = meter.process(event)
    if forwarded is None or (meter.done and not done):
        return b""
    return forwarded + b"\n\n"


async def _backend_error(flow: Flow, resp: httpx.Response) -> Ending:
    """A 4xx passes through with the backend's message, in OpenAI's shape, and its
    Retry-After (a 429's); a 503 (llama.cpp still loading its model) stays a 503 with
    Retry-After (the backend's, else 1); any other 5xx becomes a 502."""
    try:
        data = await resp.aread()
    except httpx.HTTPError as exc:
        return failed(flow, classify(exc, streaming=True))
    status = resp.status_code
    fault = "status_4xx" if status < 500 else "status_5xx"
    error = f"backend answered {status}"
    retry = _retry_after(resp)
    extra = [] if retry is None else [(b"retry-after", retry)]
    if status < 500:
        outcome = Outcome.BACKEND_REJECTED
    elif status == 503:
        outcome = Outcome.BACKEND_UNAVAILABLE
        extra = extra or [(b"retry-after", b"1")]
    else:
        outcome = Outcome.BACKEND_ERROR
        extra = []
    parsed = _json(data)
    if outcome is Outcome.BACKEND_REJECTED and isinstance(parsed, dict):
        # Its message kept, in OpenAI's shape (vLLM's has an integer code).
        data = json.dumps(wire.openai_error(parsed, status, code=outcome.value)).encode()
        headers = JSON_HEADERS + saber_headers(flow, outcome.value) + extra
        return Ending(outcome, status, data, headers, error_event=True, error=error, fault=fault)
    message = f"the backend answered {status}: {wire.error_message(data)}"
    err = GatewayError(
        outcome,
        message,
        status=status if outcome is not Outcome.BACKEND_ERROR else 502,
        code=outcome.value if outcome is Outcome.BACKEND_UNAVAILABLE else "backend_error",
    )
    ending = error_ending(flow, err, fault=fault, extra=extra)
    ending.error = error
    return ending


def _retry_after(resp: httpx.Response) -> bytes | None:
    """The backend's Retry-After as it came, if it is one (whole seconds, or an
    HTTP-date: RFC 9110, 10.2.3); else None."""
    value: str = resp.headers.get("retry-after", "").strip()
    if value.isdigit() and len(value) <= 6:
        return value.encode()
    try:
        email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return value.encode("latin-1")


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None
