"""The client's side of an exchange: the response as far as it got, and how it ends."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.types import Send

from saber import wire
from saber.gateway.errors import GatewayError
from saber.gateway.upstream.client import Header
from saber.scheduler import Outcome

if TYPE_CHECKING:
    from saber.gateway.admission.flow import Flow

SSE_HEADERS: list[Header] = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
JSON_HEADERS: list[Header] = [(b"content-type", b"application/json")]
QUEUED = b": queued\n\n"


@dataclass(slots=True)
class Ending:
    """How an exchange ends: its outcome, what to account for it, and the answer that
    is sent once the flow is finalized.

    If no response has begun, ``status``, ``headers`` and ``body`` make a whole one.
    On a stream already begun (committed while it was queued, or being relayed)
    ``body`` is its last bytes, and an ``error_event`` body (a JSON error) goes as
    one last event in the same OpenAI shape (``wire.stream_error``), then
    ``data: [DONE]``.
    """

    outcome: Outcome
    status: int
    body: bytes
    headers: list[Header] = field(default_factory=list)
    error_event: bool = False
    tokens: int | None = None  # the final count; None: the relay's count so far
    error: str | None = None  # for the log line
    fault: str | None = None  # the saber_backend_errors_total kind


def error_ending(
    flow: Flow,
    err: GatewayError,
    *,
    tokens: int | None = None,
    fault: str | None = None,
    extra: list[Header] | None = None,
) -> Ending:
    """An OpenAI-style error the gateway answers with."""
    headers = [(k.encode(), v.encode()) for k, v in err.headers.items()]
    return Ending(
        err.outcome,
        err.status,
        json.dumps(err.body()).encode(),
        JSON_HEADERS + saber_headers(flow, err.outcome.value) + headers + (extra or []),
        error_event=True,
        tokens=tokens,
        error=err.message,
        fault=fault,
    )


def saber_headers(flow: Flow, outcome: str) -> list[Header]:
    """``x-saber-task``, ``x-saber-queue-ms`` and ``x-saber-outcome``, and
    ``x-saber-default-model`` where the request named no model."""
    headers = [
        (b"x-saber-task", flow.task_name.encode()),
        (b"x-saber-queue-ms", f"{flow.queue_s() * 1000:.1f}".encode()),
        (b"x-saber-outcome", outcome.encode()),
    ]
    if flow.default_model is not None:
        headers.append((b"x-saber-default-model", flow.default_model.encode()))
    return headers


class Downstream:
    """The client's side of the response, remembering how far it got."""

    __slots__ = ("_send", "completions", "finished", "started", "status")

    def __init__(self, send: Send, *, completions: bool = False) -> None:
        self._send = send
        self.completions = completions  # /v1/completions: its error event has a choice
        self.started = False
        self.finished = False
        self.status = 0

    async def start(self, status: int, headers: list[Header]) -> None:
        self.started = True
        self.status = status
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def write(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def end(self, data: bytes = b"") -> None:
        self.finished = True
        await self._send({"type": "http.response.body", "body": data, "more_body": False})

    async def finish(self, ending: Ending) -> None:
        """Send the answer ``ending`` holds: whole, or as the end of a begun stream."""
        if not self.started:
            await self.start(ending.status, ending.headers)
            await self.end(ending.body)
        elif ending.error_event:
            await self.end(self._error_event(ending) + wire.DONE_EVENT)
        else:
            await self.end(ending.body)

    def _error_event(self, ending: Ending) -> bytes:
        """An error body (the gateway's own, or a backend's 4xx) as a stream's last event,
        in the same OpenAI shape as a whole answer's."""
        err = wire.openai_error(ending.body, ending.status)["error"]
        event = wire.stream_error(
            err["message"],
            ending.status,
            param=err["param"],
            code=err["code"],
            completions=self.completions,
        )
        return wire.json_event(event)
