"""SSE framing: cutting a byte stream into events, the data field, writing events."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from saber import wire

EVENTS = [
    b'data: {"choices": [{"index": 0, "text": "a"}]}',
    b'data: {"choices": [], "usage": {"completion_tokens": 1}}',
    b"data: [DONE]",
]


@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30), st.booleans())
def test_splitter_is_independent_of_chunking(cuts: list[int], crlf: bool) -> None:
    events = [*EVENTS, b": comment", b"event: x\ndata: {}"]
    data = b"".join(e + b"\n\n" for e in events)
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    splitter = wire.EventSplitter()
    got: list[bytes] = []
    pos = 0
    for n in cuts * (len(data) // max(sum(cuts), 1) + 1):
        if pos >= len(data):
            break
        got += splitter.feed(data[pos : pos + n])
        pos += n
    got += splitter.feed(data[pos:])
    assert got == events
    assert splitter.flush() == b""


def test_splitter_flush_returns_unterminated_tail() -> None:
    s = wire.EventSplitter()
    assert s.feed(b"data: a\n\ndata: b") == [b"data: a"]
    assert s.flush() == b"data: b"


def test_data_field() -> None:
    assert wire.data_field(b"data: [DONE]") == wire.DONE
    assert wire.data_field(b"data:x") == b"x"
    assert wire.data_field(b"event: e\ndata: a\ndata: b") == b"a\nb"
    assert wire.data_field(b": queued") is None
    assert wire.data_field(b"event: ping") is None


def test_events_are_one_line_each() -> None:
    assert wire.json_event({"a": "é"}) == 'data: {"a":"é"}\n\n'.encode()
    assert wire.event(b'{"a": 1}') == b'data: {"a": 1}\n\n'
    assert wire.event(b'{\n  "a": 1\n}') == b'data: {"a":1}\n\n'
    assert wire.event(b"not\r\njson") == b"data: not  json\n\n"
    assert json.loads(wire.event(b'{\n"e": 2}')[6:]) == {"e": 2}
    assert wire.DONE_EVENT == b"data: " + wire.DONE + b"\n\n"
