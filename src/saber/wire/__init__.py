"""The OpenAI wire format, as the gateway, saber-sim and saber-profile all speak it.

SSE framing (``EventSplitter``, ``data_field``, ``event``, ``json_event``, ``DONE``),
what a chunk carries (``carries_text``, ``text_choices``, ``completion_tokens``),
OpenAI error bodies (``error_body``, ``error_type``, ``error_message``, any error body
in OpenAI's shape, ``openai_error``, and the check ``is_openai_error``; a stream's last
event, ``stream_error``), the ``Authorization: Bearer`` header
(``auth_headers``, ``bearer_token``), and how many sequences a request runs
(``sequences``, ``prompt_count``, ``is_token_ids``). It imports nothing from the rest
of saber.
"""

from saber.wire._auth import auth_headers, bearer_token
from saber.wire._chunks import carries_text, completion_tokens, prompt_tokens, text_choices
from saber.wire._errors import (
    error_body,
    error_message,
    error_type,
    is_openai_error,
    openai_error,
    stream_error,
)
from saber.wire._sequences import Sequences, is_token_ids, prompt_count, sequences
from saber.wire._sse import DONE, DONE_EVENT, EventSplitter, data_field, event, json_event

__all__ = [
    "DONE",
    "DONE_EVENT",
    "EventSplitter",
    "Sequences",
    "auth_headers",
    "bearer_token",
    "carries_text",
    "completion_tokens",
    "data_field",
    "error_body",
    "error_message",
    "error_type",
    "event",
    "is_openai_error",
    "is_token_ids",
    "json_event",
    "openai_error",
    "prompt_count",
    "prompt_tokens",
    "sequences",
    "stream_error",
    "text_choices",
]
