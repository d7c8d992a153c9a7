"""Errors in vLLM's shape.

vLLM's OpenAI server answers every error with
``{"error": {"message", "type", "param", "code"}}``, ``code`` being the HTTP
status: ``BadRequestError``/400 for invalid requests, ``NotFoundError``/404 for
an unknown model, ``InternalServerError``/500. Inside a stream it sends the same
object as a ``data:`` frame.
"""

from __future__ import annotations

from http import HTTPStatus

from fastapi.responses import JSONResponse

from saber import wire

# vLLM names the type after the exception class it raised, not OpenAI's families.
_TYPES = {
    HTTPStatus.BAD_REQUEST: "BadRequestError",
    HTTPStatus.NOT_FOUND: "NotFoundError",
    HTTPStatus.INTERNAL_SERVER_ERROR: "InternalServerError",
    HTTPStatus.SERVICE_UNAVAILABLE: "ServiceUnavailableError",
}


class ApiError(Exception):
    """An error the client gets back as vLLM would send it."""

    def __init__(
        self,
        message: str,
        status: HTTPStatus = HTTPStatus.BAD_REQUEST,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param

    def body(self) -> dict[str, object]:
        return error_body(self.message, self.status, self.param)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=int(self.status))


def error_body(
    message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST, param: str | None = None
) -> dict[str, object]:
    """vLLM's error body: ``code`` is the status, ``type`` the exception's name."""
    kind = _TYPES.get(status, status.phrase.replace(" ", "") + "Error")
    return wire.error_body(message, int(status), code=int(status), param=param, type=kind)
