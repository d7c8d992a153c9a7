"""The exception that carries an answer the gateway gives by itself to the client."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from saber import wire
from saber.gateway.outcomes import STATUS
from saber.scheduler import Outcome


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
        self.param = param
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


def invalid(
    message: str, *, param: str | None = None, code: str = "invalid_request"
) -> GatewayError:
    return GatewayError(Outcome.INVALID_REQUEST, message, param=param, code=code)


def internal(exc: BaseException) -> GatewayError:
    """The answer to a bug: a 500 that names the exception's type, nothing more."""
    return GatewayError(Outcome.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
