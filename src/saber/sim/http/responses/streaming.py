"""Response bodies in vLLM's shapes, streamed (SSE) and whole.

A stream is ``data: {json}`` frames, one per engine step that produced tokens for
a choice, the last token's frame carrying ``finish_reason``; a chat stream opens
each choice with a ``{"role": "assistant", "content": ""}`` delta, and a tool call
(``responses.tools``) then with a delta that names the function. With
``stream_options.include_usage`` a last frame with empty ``choices`` carries
``usage``; then ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any

from saber import wire
from saber.sim.http.faults.injection import FaultDecision
from saber.sim.http.generation import Choice, Generation
from saber.sim.http.responses.errors import ApiError, error_body
from saber.sim.http.responses.tools import ToolCall


class _Format:
    """What differs between /v1/completions and /v1/chat/completions."""

    object_whole = ""
    object_chunk = ""

    def __init__(self, request_id: str, model: str) -> None:
        self.id = request_id
        self.model = model
        self.created = int(time.time())

    def frame(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        obj: dict[str, Any] = {
            "id": self.id,
            "object": self.object_chunk,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            obj["usage"] = usage
        return wire.json_event(obj)

    def openings(self, index: int) -> list[dict[str, Any]]:
        """The choices sent before a choice's first tokens, each in a frame of its own."""
        return []

    def delta(self, index: int, text: str, finish: str | None, stop: str | None) -> dict[str, Any]:
        raise NotImplementedError

    def whole_choice(self, choice: Choice, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def whole(self, choices: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": self.object_whole,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": usage,
        }


class CompletionFormat(_Format):
    object_whole = object_chunk = "text_completion"

    def delta(self, index: int, text: str, finish: str | None, stop: str | None) -> dict[str, Any]:
        return {
            "index": index,
            "text": text,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": stop,
        }

    def whole_choice(self, choice: Choice, text: str) -> dict[str, Any]:
        return {
            "index": choice.index,
            "text": text,
            "logprobs": None,
            "finish_reason": choice.answer.finish_reason,
            "stop_reason": choice.answer.stop_reason,
            "prompt_logprobs": None,
        }


class ChatFormat(_Format):
    object_whole = "chat.completion"
    object_chunk = "chat.completion.chunk"

    def openings(self, index: int) -> list[dict[str, Any]]:
        return [
            {
                "index": index,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ]

    def delta(self, index: int, text: str, finish: str | None, stop: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": index,
            "delta": {"content": text},
            "logprobs": None,
            "finish_reason": finish,
        }
        if finish is not None:
            out["stop_reason"] = stop
        return out

    def whole_choice(self, choice: Choice, text: str) -> dict[str, Any]:
        return {
            "index": choice.index,
            "message": {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [],
                "reasoning_content": None,
            },
            "logprobs": None,
            "finish_reason": choice.answer.finish_reason,
            "stop_reason": choice.answer.stop_reason,
        }

    def whole(self, choices: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any]:
        return {**super().whole(choices, usage), "prompt_logprobs": None}


class ToolChatFormat(ChatFormat):
    """A chat answer that is a tool call: the arguments stream as vLLM streams them."""

    def __init__(self, request_id: str, model: str, call: ToolCall) -> None:
        super().__init__(request_id, model)
        self.call = call
        self._ids: dict[int, str] = {}

    def call_id(self, index: int) -> str:
        return self._ids.setdefault(index, f"chatcmpl-tool-{uuid.uuid4().hex}")

    def openings(self, index: int) -> list[dict[str, Any]]:
        named = {
            "index": 0,
            "id": self.call_id(index),
            "type": "function",
            "function": {"name": self.call.name, "arguments": ""},
        }
        head = {"index": index, "delta": {"tool_calls": [named]}, "logprobs": None}
        return [*super().openings(index), {**head, "finish_reason": None}]

    def delta(self, index: int, text: str, finish: str | None, stop: str | None) -> dict[str, Any]:
        fragment = {"index": 0, "function": {"arguments": text}}
        out: dict[str, Any] = {
            "index": index,
            "delta": {"tool_calls": [fragment]},
            "logprobs": None,
            "finish_reason": finish,
        }
        if finish is not None:
            out["stop_reason"] = stop
        return out

    def whole_choice(self, choice: Choice, text: str) -> dict[str, Any]:
        out = super().whole_choice(choice, text)
        call = {
            "id": self.call_id(choice.index),
            "type": "function",
            "function": {"name": self.call.name, "arguments": text},
        }
        out["message"] = {**out["message"], "content": None, "tool_calls": [call]}
        return out


def usage(gen: Generation, *, details: bool = False) -> dict[str, Any]:
    prompt, completion = gen.prompt_tokens, gen.completion_tokens
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }
    if details:
        out["prompt_tokens_details"] = None
    return out


async def event_stream(gen: Generation, fmt: _Format, fault: FaultDecision) -> AsyncIterator[bytes]:
    """The SSE body; a stalled request stops sending and waits to be cancelled."""
    params = gen.params
    opened: set[int] = set()
    sent = 0
    async for d in gen.deltas():
        if d.error:
            yield wire.json_event(error_body(d.error, HTTPStatus.INTERNAL_SERVER_ERROR))
            break
        if fault.stall_after is not None and sent + (d.end - d.start) > fault.stall_after:
            await _stall()
        sent += d.end - d.start
        if d.choice.index not in opened:
            opened.add(d.choice.index)
            for head in fmt.openings(d.choice.index):  # vLLM sends each in a frame of its own
                yield fmt.frame([head])
        finish = d.choice.answer.finish_reason if d.finished else None
        stop = d.choice.answer.stop_reason if d.finished else None
        running = usage(gen) if params.continuous_usage else None
        yield fmt.frame([fmt.delta(d.choice.index, d.text, finish, stop)], running)
    else:
        if params.include_usage:
            yield fmt.frame([], usage(gen))
    yield wire.DONE_EVENT


async def whole_response(gen: Generation, fmt: _Format, fault: FaultDecision) -> dict[str, Any]:
    """The non-streaming body, once every choice has finished."""
    async for d in gen.deltas():
        if d.error:
            raise ApiError(d.error, HTTPStatus.INTERNAL_SERVER_ERROR)
    if fault.stall_after is not None:
        await _stall()
    choices = [fmt.whole_choice(c, c.answer.piece(0, c.generated)) for c in gen.choices]
    return fmt.whole(choices, usage(gen, details=True))


async def _stall() -> None:
    await asyncio.Event().wait()  # until the client disconnects and we are cancelled
