"""Request bodies: read within a size and a time limit, checked, rewritten minimally.

The gateway checks what it relies on (the body is UTF-8 JSON, an object, no deeper
than ``MAX_DEPTH``, with no number JSON cannot carry and no lone surrogate; the
prompt or messages are there; ``stream`` and ``model`` have usable types) and
bounds every number that reaches the scheduler or an engine (``fields``).
Everything else is the backend's business, and unknown fields pass through
untouched: when nothing needs rewriting, the client's bytes go upstream as they
came.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from saber import wire
from saber.gateway.edge import fields
from saber.gateway.edge.prompt import NO_PROMPT, Prompt, read_prompt
from saber.gateway.edge.tasks import Endpoint
from saber.gateway.errors import GatewayError, invalid, quote
from saber.gateway.upstream.dialect import VLLM, Dialect
from saber.scheduler import Outcome, Tier

MAX_DEPTH = 128
"""Arrays and objects nested deeper than this are refused (JSON Schemas in tools
nest a few dozen levels at most)."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
ONE = wire.Sequences(1, "n", 1)


@dataclass(slots=True)
class Payload:
    raw: bytes
    body: dict[str, Any]
    stream: bool
    want_usage: bool  # the client asked for stream_options.include_usage
    max_tokens: int | None
    model: str | None
    min_tokens: int = 0  # generated at the least (0 where the backend ignores min_tokens)
    seqs: wire.Sequences = ONE  # what it runs at the backend
    # ignore_eos with nothing else to stop it: each sequence makes exactly max_tokens.
    forced_length: bool = False
    prompt: Prompt = NO_PROMPT  # its size and fingerprint, for the scheduler

    def upstream_body(self, model: str | None, cap: int | None = None) -> bytes:
        """The body to relay: the client's, with the real model name, each token cap
        above ``cap`` lowered to it (and ``max_tokens`` set to it if the client sent
        none), and, for a stream, ``stream_options.include_usage`` set so that
        tokens can be counted."""
        rewrite_model = model is not None and model != self.model
        ask_usage = self.stream and not self.want_usage
        lower = cap is not None and (self.max_tokens is None or self.max_tokens > cap)
        floor = self.body.get("min_tokens")
        lower = lower or (cap is not None and isinstance(floor, int) and floor > cap)
        if not rewrite_model and not ask_usage and not lower:
            return self.raw
        body = dict(self.body)
        if rewrite_model:
            body["model"] = model
        if ask_usage:
            options = body.get("stream_options")
            body["stream_options"] = {**(options or {}), "include_usage": True}
        if lower:
            assert cap is not None
            # The caps the engine reads are checked integers; n_predict, which vLLM does
            # not read, may be anything: only an integer is lowered.
            named = [n for n in fields.CAPS if type(body.get(n)) is int]
            for name in named:
                if body[name] == -1 or body[name] > cap:
                    body[name] = cap
            if not named:
                body["max_tokens"] = cap
            if isinstance(floor, int) and floor > cap:
                body["min_tokens"] = cap  # vLLM refuses a floor above the cap
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass(slots=True)
class Call:
    """A checked request, ready to relay."""

    endpoint: Endpoint
    payload: Payload
    body: bytes  # what goes upstream
    headers: list[tuple[bytes, bytes]]  # the client's, raw
    dialect: Dialect  # the backend's, when the request arrived

    def body_for(self, tier: Tier, forward_priority: bool) -> bytes:
        """What goes upstream once admitted from ``tier``: with ``forward_priority`` and
        an engine that reads it, the tier as vLLM's request ``priority``, so that its
        own scheduler admits on-time work first and preempts demoted work first."""
        if not (forward_priority and self.dialect.reads_priority):
            return self.body
        body = json.loads(self.body)
        body["priority"] = tier.engine_priority
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The request body, refused with 413 as soon as it is known to be too large, and
    with 408 if it has not arrived whole within ``timeout_s``. A client that hangs up
    on the way raises starlette's ClientDisconnect."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise GatewayError(
            Outcome.UPLOAD_TIMEOUT,
            f"the request body did not arrive within {timeout_s:g} s",
            code="request_timeout",
            headers={"connection": "close"},
        ) from None
    return b"".join(chunks)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        Outcome.INVALID_REQUEST,
        f"request body larger than {limit} bytes",
        status=413,
        code="request_too_large",
        headers={"connection": "close"},
    )


def parse(endpoint: Endpoint, raw: bytes, dialect: Dialect = VLLM) -> Payload:
    """Check a completion request's body; a GatewayError (400) says what is wrong.

    The token cap and floor are read as ``dialect``'s engine reads them.
    """
    body = _json_object(raw)

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
        if prompt == []:
            raise invalid("'prompt' must not be an empty array", param="prompt")

    fields.check(endpoint, body, llamacpp_caps=dialect.reads_n_predict)
    max_tokens = _max_tokens(body, dialect)
    min_tokens = 0
    if dialect.honours_min_tokens:
        value = body.get("min_tokens") or 0
        min_tokens = value if max_tokens is None else min(value, max_tokens)

    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid(f"'stream' must be a boolean, got {fields.kind_of(stream)}", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise invalid("'stream_options' must be an object", param="stream_options")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid(f"'model' must be a string, got {fields.kind_of(model)}", param="model")
    return Payload(
        raw=raw,
        body=body,
        stream=stream,
        want_usage=bool(stream and options and options.get("include_usage")),
        max_tokens=max_tokens,
        model=model,
        min_tokens=min_tokens,
        seqs=wire.sequences(body, chat=endpoint == "chat"),
        forced_length=_forced_length(body),
        prompt=read_prompt(endpoint, body),
    )


def _forced_length(body: dict[str, Any]) -> bool:
    """``ignore_eos``, and no stop string or stop token that could end an answer sooner:
    vLLM and llama.cpp then generate exactly the cap."""
    return (
        body.get("ignore_eos") is True and not body.get("stop") and not body.get("stop_token_ids")
    )


def _json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 (``invalid_json``) that says why not."""
    if not raw.strip():
        raise invalid("the request body is empty; expected a JSON object", code="invalid_json")
    unusual: list[float] = []

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            unusual.append(value)
        return value

    def constant(name: str) -> float:  # NaN, Infinity, -Infinity: not JSON
        unusual.append(float(name.replace("Infinity", "inf")))
        return unusual[-1]

    try:
        body = json.loads(raw.decode("utf-8"), parse_float=number, parse_constant=constant)
    except UnicodeDecodeError as exc:
        raise invalid(f"the request body is not UTF-8: {exc}", code="invalid_json") from None
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:
        raise invalid(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        kind = fields.kind_of(body)
        raise invalid(f"the request body must be a JSON object, not {kind}", code="invalid_json")
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(body) > MAX_DEPTH:
        raise _too_deep()
    if unusual:
        name = next((k for k, v in body.items() if _holds_non_finite(v)), None)
        raise invalid(
            f"{quote(name)} holds a number JSON cannot carry ({unusual[0]}): numbers must be "
            "finite",
            param=name,
        )
    if _SURROGATE_ESCAPE.search(raw):
        for key, value in body.items():
            try:
                json.dumps({key: value}, ensure_ascii=False).encode()
            except UnicodeEncodeError:
                raise invalid(
                    f"{quote(key)} holds a lone UTF-16 surrogate (\\ud800-\\udfff), "
                    "which is not text",
                    param=key if key.isprintable() and key.isascii() else None,
                ) from None
    return body


def _too_deep() -> GatewayError:
    return invalid(
        f"the request body nests arrays and objects more than {MAX_DEPTH} deep",
        code="invalid_json",
    )


def _depth(value: object) -> int:
    """How deep arrays and objects nest in ``value`` (iteratively: no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return deepest


def _holds_non_finite(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


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
            raise invalid(f"'{name}' must be an integer, got {fields.kind_of(value)}", param=name)
        if value == -1 and dialect.reads_n_predict:
            caps[name] = None  # llama.cpp: no cap
            continue
        if value < 0:
            least = -1 if dialect.reads_n_predict else 0
            raise invalid(f"'{name}' must be >= {least}, got {value}", param=name)
        caps[name] = value
    if "n_predict" in caps:  # llama.cpp: n_predict wins over the OpenAI names
        return caps["n_predict"]
    # The larger: an engine reads one or the other (vLLM's /v1/completions reads only
    # max_tokens, its chat prefers max_completion_tokens), so a small one beside a
    # large one would have the scheduler expect less than the engine may generate.
    given = [cap for cap in caps.values() if cap is not None]
    return max(given) if given else None
