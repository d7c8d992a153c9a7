"""OpenAI error bodies: writing one, and reading the message out of any error body."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

# The "type" OpenAI gives each family of status codes.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    """OpenAI's ``type`` for an error answered with ``status``."""
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(
    message: str,
    status: int,
    *,
    code: str | int | None = None,
    param: str | None = None,
    type: str | None = None,
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``, the body OpenAI (and vLLM)
    send with an error and that SDKs know how to read. ``type`` defaults to OpenAI's
    for ``status``."""
    return {
        "error": {
            "message": message,
            "type": type or error_type(status),
            "param": param,
            "code": code,
        }
    }


def error_message(body: Any, limit: int = 300) -> str:
    """What an error body says, shortened to ``limit`` characters: its
    ``error.message`` (OpenAI, vLLM, llama.cpp), a bare ``error`` string or top-level
    ``message``, else the body itself. ``body`` is raw bytes, or already parsed."""
    if isinstance(body, bytes | str):
        try:
            body = json.loads(body)
        except ValueError:
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
            return text.strip()[:limit] or "(empty body)"
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:limit]
        if isinstance(err, str) and err:
            return err[:limit]
        if body.get("message"):
            return str(body["message"])[:limit]
    return json.dumps(body)[:limit]


def stream_error_type(status: int) -> str:
    """vLLM's ``type`` for an error with ``status``, named as an exception class:
    ``BadRequestError``, ``NotFoundError``, ``ServiceUnavailableError``..."""
    try:
        words = HTTPStatus(status).phrase.split()
    except ValueError:
        return "InternalServerError" if status >= 500 else "BadRequestError"
    name = "".join(w[:1].upper() + w[1:] for w in words)
    return name if name.endswith("Error") else name + "Error"


def stream_error(
    message: str, status: int, *, param: str | None = None, completions: bool = False
) -> dict[str, Any]:
    """The event that ends a stream with an error once its 200 is sent, in the shape
    vLLM sends: ``{"error": {"message", "type", "param", "code": <status>}}``, which
    openai-python, openai-node, the AI SDK and Continue raise with its message.

    For /v1/completions (``completions``) it also carries one choice that has
    finished, with no text: Tabby's completion client reads every event as a chunk
    with ``choices`` and fails on one without, and it stops at a ``finish_reason``.
    """
    body: dict[str, Any] = {
        "error": {
            "message": message,
            "type": stream_error_type(status),
            "param": param,
            "code": status,
        }
    }
    if completions:
        body["choices"] = [{"index": 0, "text": "", "logprobs": None, "finish_reason": "error"}]
    return body
