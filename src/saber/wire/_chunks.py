"""What a completion chunk (or a whole completion) carries: generated text, and usage."""

from __future__ import annotations

from typing import Any

# Fields of a chat delta that carry generated output: text, reasoning (vLLM's
# ``reasoning_content``, and ``reasoning`` from newer servers), and calls.
_DELTA_OUTPUT = ("content", "reasoning_content", "reasoning", "tool_calls", "function_call")


def carries_text(choice: Any) -> bool:
    """Whether a streamed choice carries generated output: ``text`` on
    /v1/completions, a delta's content, reasoning, ``tool_calls`` or legacy
    ``function_call`` on /v1/chat/completions. A chat stream's opening role delta
    (``{"role": "assistant", "content": ""}``) carries none."""
    if not isinstance(choice, dict):
        return False
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    # _DELTA_OUTPUT spelled out: this runs for every relayed chunk.
    return bool(
        delta.get("content")
        or delta.get("reasoning_content")
        or delta.get("reasoning")
        or delta.get("tool_calls")
        or delta.get("function_call")
    )


def text_choices(chunk: Any) -> int:
    """How many choices of a chunk carry generated output."""
    if not isinstance(chunk, dict):
        return 0
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return 0
    return sum(carries_text(choice) for choice in choices)


def completion_tokens(obj: Any) -> int | None:
    """``usage.completion_tokens`` of a chunk or a whole completion, None without one."""
    return _usage(obj, "completion_tokens")


def prompt_tokens(obj: Any) -> int | None:
    """``usage.prompt_tokens`` of a chunk or a whole completion, None without one: the
    engine's count of the prompt, which the gateway learns a prompt's size from."""
    return _usage(obj, "prompt_tokens")


def _usage(obj: Any, name: str) -> int | None:
    usage = obj.get("usage") if isinstance(obj, dict) else None
    tokens = usage.get(name) if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None
