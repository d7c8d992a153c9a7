"""The exception that carries an answer the gateway gives by itself to the client, and
how its message quotes what the client sent (``quote``: never more than 100 characters)."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from saber import wire
from saber.scheduler import Outcome

QUOTE_LIMIT = 100
"""The most characters of a client's value that an error message quotes: a 60 KB header
is not sent back whole."""


STATUS: dict[Outcome, int] = {
    Outcome.SERVED: 200,
    Outcome.SERVED_DEMOTED: 200,
    Outcome.CANCELLED_QUEUED: 499,
    Outcome.CANCELLED_RUNNING: 499,
    Outcome.REJECTED_QUEUE_FULL: 429,
    Outcome.REJECTED_EXPIRED: 503,
    Outcome.INVALID_REQUEST: 400,
    Outcome.UNAUTHORIZED: 401,
    Outcome.FORBIDDEN: 403,
    Outcome.CANCELLED_UPLOAD: 499,
    Outcome.UPLOAD_TIMEOUT: 408,
    Outcome.REJECTED_DRAINING: 503,
    Outcome.DRAIN_TIMEOUT: 503,
    Outcome.BACKEND_UNAVAILABLE: 503,
    Outcome.BACKEND_TIMEOUT: 504,
    Outcome.BACKEND_REJECTED: 400,
    Outcome.BACKEND_ERROR: 502,
    Outcome.INTERNAL_ERROR: 500,
}
"""499: the client had gone; for ``backend_rejected`` the backend's own 4xx is passed
through; ``drain_timeout`` on a stream already begun ends it with an error event."""


class GatewayError(Exception):
    """An answer the gateway gives by itself, with its outcome and headers."""

    def __init__(
        self,
        outcome: Outcome,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message
        self.status = status if status is not None else STATUS[outcome]
        self.code = code or outcome.value
        # A field's name, never a client's long text (an unknown key of 60 KB).
        self.param = param if param is None or len(param) <= QUOTE_LIMIT else None
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return wire.error_body(self.message, self.status, code=self.code, param=self.param)

    def response(self, extra_headers: dict[str, str] | None = None) -> Response:
        headers = {**self.headers, **(extra_headers or {})}
        return Response(
            json.dumps(self.body()).encode(),
            status_code=self.status,
            headers=headers,
            media_type="application/json",
        )


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """A value the client sent, as an error message shows it: its ``repr`` (a string in
    quotes, its unprintable characters escaped), cut after ``limit`` characters with an
    ellipsis and the value's length."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except ValueError:  # an integer past Python's digit limit
        return "an integer too long to show"
    if len(text) <= limit:
        return repr(value) if isinstance(value, str) else text
    shown = repr(text[:limit]) if isinstance(value, str) else text[:limit]
    return f"{shown}... ({len(text):,} characters)"


def invalid(
    message: str, *, param: str | None = None, code: str = "invalid_request"
) -> GatewayError:
    return GatewayError(Outcome.INVALID_REQUEST, message, param=param, code=code)


def internal(exc: BaseException) -> GatewayError:
    """The answer to a bug: a 500 that names the exception's type, nothing more."""
    return GatewayError(Outcome.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
