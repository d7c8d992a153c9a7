"""A llama-server stand-in behind httpx.MockTransport, for the gateway's relay tests.

It answers the probe endpoints as llama-server does (``/v1/models`` owned by
``llamacpp``, ``/props`` with ``build_info``, ``/metrics`` with ``llamacpp:``
gauges, no ``/version``) and completions with llama.cpp's wire shapes, which
the test sets. The real engine is covered by the ``llamacpp`` test tier.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

BUILD_INFO = "b7310-5814b4dce"
MODEL = "tiny-gguf"
USAGE = {"completion_tokens": 7, "prompt_tokens": 3, "total_tokens": 10}


def sse(*events: object) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def choice(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}


def error(status: int, message: str, type_: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "type": type_}}


# /v1/completions, streamed: usage (and timings) on the finishing chunk, asked or not.
COMPLETION_STREAM = sse(
    {"choices": [choice("a")], "object": "text_completion", "model": MODEL},
    {
        "choices": [choice("b", "length")],
        "object": "text_completion",
        "model": MODEL,
        "usage": USAGE,
        "timings": {"predicted_n": 7},
    },
) + (b"data: [DONE]\n\n")
# An error after the first token: an error event, and no [DONE].
ERROR_STREAM = sse(
    {"choices": [choice("a")], "object": "text_completion", "model": MODEL},
    {"error": {"code": 500, "message": "decode failed", "type": "server_error"}},
)


@dataclass
class FakeLlamaCpp:
    """Set ``processing``/``deferred``, ``loading``, ``stream`` or ``reply``; read ``posts``."""

    processing: int = 2
    deferred: int = 1
    loading: bool = False
    stream: bytes = COMPLETION_STREAM
    reply: tuple[int, dict[str, Any]] | None = None  # a whole JSON answer instead
    posts: list[dict[str, Any]] = field(default_factory=list)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if self.loading:  # llama-server answers so on every route until the model is in
            return httpx.Response(503, json=error(503, "Loading model", "unavailable_error"))
        if request.method == "POST":
            self.posts.append(json.loads(request.content))
            if self.reply is not None:
                status, body = self.reply
                return httpx.Response(status, json=body)
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=self.stream
            )
        if path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if path == "/v1/models":
            card = {"id": MODEL, "object": "model", "created": 0, "owned_by": "llamacpp"}
            return httpx.Response(200, json={"object": "list", "data": [card]})
        if path == "/props":
            return httpx.Response(200, json={"build_info": BUILD_INFO, "total_slots": 4})
        if path == "/metrics":
            text = (
                "# HELP llamacpp:requests_processing Number of requests processing.\n"
                "# TYPE llamacpp:requests_processing gauge\n"
                f"llamacpp:requests_processing {self.processing}\n"
                "# HELP llamacpp:requests_deferred Number of requests deferred.\n"
                "# TYPE llamacpp:requests_deferred gauge\n"
                f"llamacpp:requests_deferred {self.deferred}\n"
            )
            return httpx.Response(200, text=text)
        return httpx.Response(404, json=error(404, "File Not Found", "not_found_error"))
