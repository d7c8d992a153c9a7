"""What a chunk carries: generated output of every kind, and usage."""

from __future__ import annotations

import pytest

from saber import wire


@pytest.mark.parametrize(
    ("choice", "carries"),
    [
        ({"index": 0, "text": "def"}, True),  # /v1/completions
        ({"index": 0, "text": ""}, False),
        ({"delta": {"content": "x"}}, True),
        ({"delta": {"role": "assistant", "content": ""}}, False),  # a chat stream's opening
        ({"delta": {"reasoning_content": "hmm"}}, True),  # vLLM's reasoning parsers
        ({"delta": {"reasoning": "hmm"}}, True),
        ({"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}}, True),
        ({"delta": {"tool_calls": []}}, False),
        ({"delta": {"function_call": {"name": "f"}}}, True),  # legacy
        ({"delta": {}, "finish_reason": "stop"}, False),
        ("text", False),
        (None, False),
    ],
)
def test_carries_text(choice: object, carries: bool) -> None:
    assert wire.carries_text(choice) is carries


def test_text_choices_counts_choices_with_output() -> None:
    chunk = {"choices": [{"text": "a"}, {"text": ""}, {"delta": {"content": "b"}}]}
    assert wire.text_choices(chunk) == 2
    assert wire.text_choices({"choices": [], "usage": {"completion_tokens": 3}}) == 0
    assert wire.text_choices({"choices": None}) == 0
    assert wire.text_choices([1]) == 0


def test_completion_tokens() -> None:
    assert wire.completion_tokens({"usage": {"completion_tokens": 7}}) == 7
    assert wire.completion_tokens({"usage": None}) is None
    assert wire.completion_tokens({"usage": {"completion_tokens": "7"}}) is None
    assert wire.completion_tokens({"usage": {"completion_tokens": True}}) is None
    assert wire.completion_tokens("usage") is None
