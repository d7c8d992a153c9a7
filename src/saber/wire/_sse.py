"""Server-sent events: cutting a byte stream into events, and writing them."""

from __future__ import annotations

import json

DONE = b"[DONE]"
"""The data of the event that ends an OpenAI stream."""
DONE_EVENT = b"data: [DONE]\n\n"


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


def data_field(event: bytes) -> bytes | None:
    """The data field of an event (its ``data:`` lines joined), None for comments and
    events without one."""
    if event.startswith(b"data:") and b"\n" not in event:
        return event[5:].lstrip(b" ")
    lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def json_event(obj: object) -> bytes:
    """``obj`` as one ``data:`` event, compact JSON, blank line included."""
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def event(data: bytes) -> bytes:
    """``data`` (a JSON body) as one ``data:`` event: a body on several lines is
    re-encoded on one, as every OpenAI client reads one line per event."""
    if b"\n" in data or b"\r" in data:
        try:
            return json_event(json.loads(data))
        except ValueError:
            data = data.replace(b"\r", b" ").replace(b"\n", b" ")
    return b"data: " + data + b"\n\n"
