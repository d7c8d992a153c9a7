"""OpenAI error bodies: writing one, reading the message out of any error body, and
rewriting any error body (vLLM's, llama.cpp's, FastAPI's) into OpenAI's shape."""

from __future__ import annotations

import json
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


OPENAI_TYPES = frozenset({*_TYPES.values(), "server_error"})
"""The ``type`` values OpenAI sends; any other (vLLM's ``BadRequestError``) is replaced."""


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
        if isinstance(body.get("detail"), str) and body["detail"]:  # FastAPI's own errors
            return str(body["detail"])[:limit]
    return json.dumps(body)[:limit]


def openai_error(
    body: Any, status: int, *, code: str | None = None, limit: int = 2000
) -> dict[str, Any]:
    """Any error body (raw bytes, or parsed) in OpenAI's shape, its message kept: vLLM's
    (``type`` ``BadRequestError``, ``code`` the status), llama.cpp's (an integer
    ``code``), FastAPI's ``{"detail": ...}``, plain text. A ``type`` OpenAI does not
    send becomes OpenAI's for ``status``; a string ``code`` and ``param`` are kept,
    an integer ``code`` becomes ``code``."""
    if isinstance(body, bytes | str):
        try:
            parsed: Any = json.loads(body)
        except ValueError:
            parsed = None
    else:
        parsed = body
    err = parsed.get("error") if isinstance(parsed, dict) else None
    err = err if isinstance(err, dict) else (parsed if isinstance(parsed, dict) else {})
    kind, own_code, param = err.get("type"), err.get("code"), err.get("param")
    return error_body(
        error_message(parsed if parsed is not None else body, limit=limit),
        status,
        code=own_code if isinstance(own_code, str) and own_code else code,
        param=param if isinstance(param, str) else None,
        type=kind if kind in OPENAI_TYPES else None,
    )


def is_openai_error(body: Any) -> bool:
    """Whether a parsed body is an error in OpenAI's shape: ``error`` with a non-empty
    string ``message``, one of OpenAI's ``type`` values, and ``param`` and ``code`` each
    a string or null."""
    err = body.get("error") if isinstance(body, dict) else None
    return (
        isinstance(err, dict)
        and isinstance(err.get("message"), str)
        and bool(err["message"])
        and err.get("type") in OPENAI_TYPES
        and all(k in err and (err[k] is None or isinstance(err[k], str)) for k in ("param", "code"))
    )


def stream_error(
    message: str,
    status: int,
    *,
    param: str | None = None,
    code: str | None = None,
    completions: bool = False,
) -> dict[str, Any]:
    """The event that ends a stream with an error once its 200 is sent:
    ``{"error": {"message", "type", "param", "code"}}`` as in a whole answer (``type``
    OpenAI's for ``status``), which openai-python, openai-node, the AI SDK and Continue
    raise with its message.

    For /v1/completions (``completions``) it also carries one choice that has
    finished, with no text: Tabby's completion client reads every event as a chunk
    with ``choices`` and fails on one without, and it stops at a ``finish_reason``.
    """
    body = error_body(message, status, code=code, param=param)
    if completions:
        body["choices"] = [{"index": 0, "text": "", "logprobs": None, "finish_reason": "error"}]
    return body
