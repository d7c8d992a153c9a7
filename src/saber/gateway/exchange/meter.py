"""A stream's events as they pass: tokens counted, the first one found, usage rewritten.

The gateway always asks the backend for usage (``stream_options.include_usage``)
so that it can count tokens exactly. Two shapes arrive: vLLM sends a separate
chunk with empty ``choices`` (so does llama.cpp for chat); llama.cpp's
``/v1/completions`` puts ``usage`` on the last chunk, the one with
``finish_reason``, whether asked or not. If the client did not ask for usage, the
separate chunk is dropped, and usage on a chunk with choices is removed unless
the engine puts it there by itself (``keep_choice_usage``, llama.cpp), so the
client sees what it would have seen without the gateway. Non-streaming answers
carry ``usage`` in both engines and pass as they are.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from saber import wire


class StreamMeter:
    """Counts tokens and finds the first one, rewriting usage for the client."""

    __slots__ = (
        "chunks",
        "done",
        "error",
        "keep_choice_usage",
        "prompt_tokens",
        "usage_tokens",
        "want_usage",
    )

    def __init__(self, want_usage: bool, keep_choice_usage: bool = False) -> None:
        self.want_usage = want_usage
        self.keep_choice_usage = keep_choice_usage
        self.chunks = 0  # choices that carried generated text
        self.usage_tokens: int | None = None
        self.prompt_tokens: int | None = None  # the engine's count of the prompt
        self.done = False  # [DONE] has passed
        self.error: Any = None

    @property
    def first_token(self) -> bool:
        """Generated text has passed."""
        return self.chunks > 0

    @property
    def tokens(self) -> int:
        """Generated tokens: the backend's usage when it sent one, else counted chunks."""
        return self.usage_tokens if self.usage_tokens is not None else self.chunks

    def process(self, event: bytes) -> bytes | None:
        """The event to forward (maybe rewritten), or None to drop it."""
        data = wire.data_field(event)
        if data is None:
            return event
        if data == wire.DONE:
            self.done = True
            return event
        try:
            obj = orjson.loads(data)  # a quarter of json's time, on every chunk
        except orjson.JSONDecodeError:
            try:  # NaN or Infinity, which Python's json reads and orjson does not
                obj = json.loads(data.decode())
            except ValueError:
                return event
        if not isinstance(obj, dict):
            return event
        if "error" in obj:
            self.error = obj["error"]
            return _openai_error_event(obj)
        self.chunks += wire.text_choices(obj)
        if not isinstance(obj.get("usage"), dict):
            return event
        completion = wire.completion_tokens(obj)
        if completion is not None:
            self.usage_tokens = completion
        self.prompt_tokens = wire.prompt_tokens(obj) or self.prompt_tokens
        if self.want_usage:
            return event
        if not obj.get("choices"):
            return None  # the separate usage chunk, which the gateway asked for
        if self.keep_choice_usage:
            return event  # llama.cpp's, on the finishing chunk: it is always there
        del obj["usage"]
        return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def _openai_error_event(obj: dict[str, Any]) -> bytes:
    """A backend's error event in OpenAI's shape, its message kept (vLLM's and llama.cpp's
    carry the status as an integer ``code``)."""
    err = obj["error"]
    status = err.get("code") if isinstance(err, dict) else None
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        status = 500
    body = {**obj, **wire.openai_error(obj, status, code="backend_error")}
    return b"data: " + json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
