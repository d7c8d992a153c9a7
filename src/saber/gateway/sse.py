"""Server-sent events as they pass: framing, token counting, the usage chunk.

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

DONE = b"[DONE]"


class EventSplitter:
    """Cuts a byte stream into SSE events (blocks that end with a blank line)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events completed by ``chunk``, each without its blank-line terminator."""
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # CRLF and lone CR are legal line ends; a CR at the very end may be the
            # first half of a CRLF, so it waits for the next chunk.
            keep = buf.endswith(b"\r")
            body = buf[:-1] if keep else buf
            buf = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + (b"\r" if keep else b"")
        parts = buf.split(b"\n\n")
        self._buf = parts.pop()
        return [p for p in parts if p]

    def flush(self) -> bytes:
        """What is left when the stream ends (an event without its blank line)."""
        rest, self._buf = self._buf.strip(b"\r\n"), b""
        return rest


def _data(event: bytes) -> bytes | None:
    """The data field of an event, or None for comments and other fields."""
    if event.startswith(b"data:") and b"\n" not in event:
        return event[5:].lstrip(b" ")
    lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


class StreamMeter:
    """Counts tokens and finds the first one, rewriting usage for the client."""

    __slots__ = (
        "chunks",
        "done",
        "error",
        "first_token",
        "keep_choice_usage",
        "usage_tokens",
        "want_usage",
    )

    def __init__(self, want_usage: bool, keep_choice_usage: bool = False) -> None:
        self.want_usage = want_usage
        self.keep_choice_usage = keep_choice_usage
        self.chunks = 0  # choices that carried generated text
        self.usage_tokens: int | None = None
        self.first_token = False
        self.done = False
        self.error: Any = None

    @property
    def tokens(self) -> int:
        """Generated tokens: the backend's usage when it sent one, else counted chunks."""
        return self.usage_tokens if self.usage_tokens is not None else self.chunks

    def process(self, event: bytes) -> bytes | None:
        """The event to forward (maybe rewritten), or None to drop it."""
        data = _data(event)
        if data is None:
            return event
        if data == DONE:
            self.done = True
            return event
        try:
            obj = json.loads(data)
        except ValueError:
            return event
        if not isinstance(obj, dict):
            return event
        if "error" in obj:
            self.error = obj["error"]
            return event
        choices = obj.get("choices")
        if choices:
            for choice in choices:
                if _carries_text(choice):
                    self.chunks += 1
                    self.first_token = True
        usage = obj.get("usage")
        if not isinstance(usage, dict):
            return event
        completion = usage.get("completion_tokens")
        if isinstance(completion, int):
            self.usage_tokens = completion
        if self.want_usage:
            return event
        if not choices:
            return None  # the separate usage chunk, which the gateway asked for
        if self.keep_choice_usage:
            return event  # llama.cpp's, on the finishing chunk: it is always there
        del obj["usage"]
        return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def _carries_text(choice: Any) -> bool:
    if not isinstance(choice, dict):
        return False
    text = choice.get("text")  # /v1/completions
    if text:
        return True
    delta = choice.get("delta")  # /v1/chat/completions
    if isinstance(delta, dict):
        return bool(
            delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")
        )
    return False
