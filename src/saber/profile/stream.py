"""One streamed completion, timed from the client's side.

Times are ``time.perf_counter()`` seconds. TTFT runs from sending the request to
the first chunk that carries generated text (a chat stream's opening role delta
does not count); the end is the end of the stream. Tokens come from ``usage``
(asked for with ``stream_options.include_usage``), because streamed chunks are
not tokens on every engine.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from saber import wire
from saber.profile.requests import RequestSpec

Endpoint = Literal["completions", "chat"]


@dataclass(frozen=True)
class Target:
    """Where to send: the server's root URL (no ``/v1``), the model, how to authenticate.

    ``headers`` belong on the client that sends (``send`` adds none of its own).
    """

    root: str
    model: str
    endpoint: Endpoint = "completions"
    api_key: str | None = None

    @property
    def url(self) -> str:
        path = "chat/completions" if self.endpoint == "chat" else "completions"
        return f"{self.root}/v1/{path}"

    @property
    def headers(self) -> dict[str, str]:
        return wire.auth_headers(self.api_key)


@dataclass(frozen=True)
class Outcome:
    """What one request took; ``first`` is None when no text came back at all."""

    sent: float
    first: float | None
    end: float
    completion_tokens: int
    prompt_tokens: int | None
    from_usage: bool


class RequestFailed(Exception):
    """The backend answered with an error (an HTTP status or an error frame)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message

    @property
    def too_long(self) -> bool:
        """A 400 about the context length: the request, not the backend, is at fault."""
        text = self.message.lower()
        return self.status == 400 and any(
            word in text for word in ("context", "too long", "max_model_len", "maximum", "exceed")
        )


def payload(target: Target, spec: RequestSpec) -> dict[str, Any]:
    """The request body: streamed, output length forced with ``max_tokens`` + ``ignore_eos``."""
    body: dict[str, Any] = {
        "model": target.model,
        "max_tokens": spec.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if target.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": spec.prompt}]
    else:
        body["prompt"] = spec.prompt
    return body


async def send(client: httpx.AsyncClient, target: Target, spec: RequestSpec) -> Outcome:
    """Send one request and read its stream to the end; RequestFailed on an error reply."""
    sent = time.perf_counter()
    first: float | None = None
    usage: dict[str, Any] | None = None
    chunks = 0
    async with client.stream("POST", target.url, json=payload(target, spec)) as response:
        if response.status_code != 200:
            body = await response.aread()
            raise RequestFailed(response.status_code, wire.error_message(body, limit=200))
        async for line in response.aiter_lines():
            # Decoding every frame would cost more CPU than the backend spends at
            # high loads, and the client must not be what limits the speed it
            # measures: only frames that can matter are parsed.
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            if first is not None and "usage" not in data and '"error"' not in data:
                chunks += 1
                continue
            try:
                frame = json.loads(data)
            except json.JSONDecodeError:
                continue
            if not isinstance(frame, dict):
                continue
            if "error" in frame:
                raise RequestFailed(0, wire.error_message(frame, limit=200))
            if frame.get("usage"):
                usage = frame["usage"]
            if wire.text_choices(frame):
                chunks += 1
                if first is None:
                    first = time.perf_counter()
    end = time.perf_counter()
    if usage and isinstance(usage.get("completion_tokens"), int):
        prompt = usage.get("prompt_tokens")
        return Outcome(
            sent,
            first,
            end,
            usage["completion_tokens"],
            prompt if isinstance(prompt, int) else None,
            True,
        )
    return Outcome(sent, first, end, chunks, None, False)
