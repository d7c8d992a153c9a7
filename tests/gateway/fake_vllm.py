"""A vLLM stand-in behind httpx.MockTransport: fast, and it records what it was sent.

It answers completions with vLLM's wire shapes (a whole answer, or a stream with a
usage chunk and ``data: [DONE]``), generating ``min(max_tokens, tokens)`` tokens (8 by default), and
refuses anything that is not strict JSON (``NaN``, ``Infinity``): what the gateway
relays must be. ``reply`` makes it answer every completion with a status, a body
and headers instead. Tests that need a real engine use saber-sim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

MODEL = "fake-coder"
TOKENS = 8


def _strict(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


@dataclass
class FakeVllm:
    reply: tuple[int, dict[str, Any], dict[str, str]] | None = None
    tokens: int = TOKENS  # the most it generates
    posts: list[tuple[dict[str, Any], httpx.Headers]] = field(default_factory=list)
    bad_json: int = 0  # bodies that were not strict JSON

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST":
            try:
                body = json.loads(request.content, parse_constant=_strict)
            except (ValueError, RecursionError):
                self.bad_json += 1
                return httpx.Response(400, json=_error(400, "not JSON"))
            self.posts.append((body, request.headers))
            if self.reply is not None:
                status, data, headers = self.reply
                return httpx.Response(status, json=data, headers=headers)
            cap = body.get("max_tokens")
            tokens = min(cap, self.tokens) if isinstance(cap, int) else self.tokens
            return _stream(path, tokens) if body.get("stream") else _whole(path, tokens)
        if path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            card = {"id": MODEL, "object": "model", "created": 0, "owned_by": "vllm"}
            return httpx.Response(200, json={"object": "list", "data": [card]})
        return httpx.Response(404, json=_error(404, "not found"))


def _usage(tokens: int) -> dict[str, int]:
    return {"prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": tokens + 3}


def _choice(path: str, text: str, finish: str | None) -> dict[str, Any]:
    if path.endswith("/chat/completions"):
        return {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    return {"index": 0, "text": text, "finish_reason": finish}


def _whole(path: str, tokens: int) -> httpx.Response:
    if path.endswith("/chat/completions"):
        choice = {"index": 0, "message": {"role": "assistant", "content": "x" * tokens}}
    else:
        choice = {"index": 0, "text": "x" * tokens}
    body = {"id": "cmpl-1", "model": MODEL, "choices": [choice], "usage": _usage(tokens)}
    return httpx.Response(200, json=body)


def _stream(path: str, tokens: int) -> httpx.Response:
    events = [
        {"id": "cmpl-1", "model": MODEL, "choices": [_choice(path, "x", None)]}
        for _ in range(tokens)
    ]
    events.append({"id": "cmpl-1", "model": MODEL, "choices": [], "usage": _usage(tokens)})
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=data + b"data: [DONE]\n\n"
    )


def _error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "BadRequestError", "param": None, "code": status}}
