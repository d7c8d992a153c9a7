"""OpenAI-style error bodies, and the exception that carries one to the client."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from saber.gateway.outcomes import STATUS, Outcome

# The "type" field OpenAI uses for each family of status codes.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(
    message: str, *, status: int, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """The body OpenAI (and vLLM) send with an error, which SDKs know how to read."""
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


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
        return error_body(self.message, status=self.status, code=self.code, param=self.param)

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
