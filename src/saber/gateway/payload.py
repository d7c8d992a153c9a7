"""Request bodies: read within a size limit, checked just enough, rewritten minimally.

The gateway checks only what it relies on (the body is a JSON object; the prompt
or messages are there; ``max_tokens``, ``stream`` and ``model`` have usable
types). Everything else is the backend's business, and unknown fields pass
through untouched: when nothing needs rewriting, the client's bytes go upstream
as they came.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from saber.gateway.dialect import VLLM, Dialect
from saber.gateway.errors import GatewayError, invalid
from saber.gateway.tasks import Endpoint
from saber.scheduler import Outcome

PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


@dataclass(slots=True)
class Payload:
    raw: bytes
    body: dict[str, Any]
    stream: bool
    want_usage: bool  # the client asked for stream_options.include_usage
    max_tokens: int | None
    model: str | None
    min_tokens: int = 0  # generated at the least (0 where the backend ignores min_tokens)

    def upstream_body(self, model: str | None) -> bytes:
        """The body to relay: the client's, with the real model name and, for a
        stream, ``stream_options.include_usage`` set so that tokens can be counted."""
        rewrite_model = model is not None and model != self.model
        ask_usage = self.stream and not self.want_usage
        if not rewrite_model and not ask_usage:
            return self.raw
        body = dict(self.body)
        if rewrite_model:
            body["model"] = model
        if ask_usage:
            options = body.get("stream_options")
            body["stream_options"] = {**(options or {}), "include_usage": True}
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass(slots=True)
class Call:
    """A checked request, ready to relay."""

    endpoint: Endpoint
    payload: Payload
    body: bytes  # what goes upstream
    headers: list[tuple[bytes, bytes]]  # the client's, raw
    dialect: Dialect  # the backend's, when the request arrived


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to be too large."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        Outcome.INVALID_REQUEST,
        f"request body larger than {limit} bytes",
        status=413,
        code="request_too_large",
    )


def parse(endpoint: Endpoint, raw: bytes, dialect: Dialect = VLLM) -> Payload:
    """Check a completion request's body; a GatewayError (400) says what is wrong.

    The token cap and floor are read as ``dialect``'s engine reads them.
    """
    if not raw.strip():
        raise invalid("the request body is empty; expected a JSON object", code="invalid_json")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise invalid(
            f"the request body must be a JSON object, not {_kind(body)}", code="invalid_json"
        )

    if endpoint == "chat":
        messages = body.get("messages")
        if messages is None:
            raise invalid(
                "'messages' is a required property",
                param="messages",
                code="missing_required_parameter",
            )
        if not isinstance(messages, list) or not messages:
            raise invalid("'messages' must be a non-empty array", param="messages")
    else:
        prompt = body.get("prompt")
        if prompt is None:
            raise invalid(
                "'prompt' is a required property", param="prompt", code="missing_required_parameter"
            )
        if not isinstance(prompt, str | list):
            raise invalid("'prompt' must be a string or an array", param="prompt")

    max_tokens = _max_tokens(body, dialect)
    min_tokens = 0
    if dialect.honours_min_tokens:
        value = body.get("min_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            # A bad value is the backend's to refuse; a good one is a floor.
            min_tokens = value if max_tokens is None else min(value, max_tokens)

    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid(f"'stream' must be a boolean, got {_kind(stream)}", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise invalid("'stream_options' must be an object", param="stream_options")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid(f"'model' must be a string, got {_kind(model)}", param="model")
    return Payload(
        raw=raw,
        body=body,
        stream=stream,
        want_usage=bool(stream and options and options.get("include_usage")),
        max_tokens=max_tokens,
        model=model,
        min_tokens=min_tokens,
    )


def _max_tokens(body: dict[str, Any], dialect: Dialect) -> int | None:
    """The cap on generated tokens, None for none."""
    names: tuple[str, ...] = ("max_completion_tokens", "max_tokens")
    if dialect.reads_n_predict:
        names += ("n_predict",)
    caps: dict[str, int | None] = {}
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(f"'{name}' must be an integer, got {_kind(value)}", param=name)
        if value == -1 and dialect.reads_n_predict:
            caps[name] = None  # llama.cpp: no cap
            continue
        if value < 0:
            least = -1 if dialect.reads_n_predict else 0
            raise invalid(f"'{name}' must be >= {least}, got {value}", param=name)
        caps[name] = value
    if "n_predict" in caps:  # llama.cpp: n_predict wins over the OpenAI names
        return caps["n_predict"]
    given = [cap for cap in caps.values() if cap is not None]
    return min(given) if given else None


def _kind(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )
