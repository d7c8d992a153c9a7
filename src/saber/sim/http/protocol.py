"""Request bodies of the two generation routes, checked the way vLLM checks them.

Unknown fields are accepted and ignored (vLLM logs and ignores them). Everything
a check rejects becomes an ``ApiError`` (400, or 404 for an unknown model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictInt, ValidationError

from saber.sim.http.lengths import Prompt, chat_prompt, completion_prompts
from saber.sim.http.responses.errors import ApiError
from saber.sim.http.responses.tools import ToolCall, plan_tool_call
from saber.workload import count_tokens


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    max_tokens: int | None = None
    n: int | None = 1
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    temperature: float | None = None
    ignore_eos: bool = False
    min_tokens: int = 0
    include_stop_str_in_output: bool = False
    # vLLM's: lower is served earlier under --scheduling-policy priority. Strict, so
    # that "1", 1.5 or true is a 400 rather than a silent coercion.
    priority: StrictInt = 0


class CompletionBody(_Body):
    prompt: str | list[str] | list[int] | list[list[int]]


class ChatBody(_Body):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None


@dataclass(frozen=True)
class Generate:
    """A checked generation request, whichever route it came through."""

    model: str
    prompts: list[Prompt]
    max_tokens: list[int]  # per prompt, after the max_model_len default
    n: int  # choices per prompt: each one a request of its own in the engine, as in vLLM V1
    ignore_eos: bool
    min_tokens: int
    stop: tuple[str, ...]
    include_stop: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    priority: int = 0  # each choice's engine priority; fcfs ignores it
    tool: ToolCall | None = None  # a chat answer that calls this function (responses.tools)


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(f"The request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError("The request body must be a JSON object.")
    return data


def parse_completion(data: dict[str, Any], models: tuple[str, ...], max_model_len: int) -> Generate:
    body = _validate(CompletionBody, data)
    prompts = completion_prompts(body.prompt)
    if not prompts:
        raise ApiError("Prompt cannot be empty.", param="prompt")
    if any(p.tokens == 0 for p in prompts):
        raise ApiError("Prompt cannot be empty.", param="prompt")
    return _finish(body, body.max_tokens, prompts, models, max_model_len)


def parse_chat(data: dict[str, Any], models: tuple[str, ...], max_model_len: int) -> Generate:
    body = _validate(ChatBody, data)
    if not body.messages:
        raise ApiError("messages must contain at least one message.", param="messages")
    for i, message in enumerate(body.messages):
        if not isinstance(message.get("role"), str):
            raise ApiError(f"messages[{i}] has no role.", param=f"messages.{i}.role")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise ApiError(
                f"messages[{i}].content must be a string or a list of parts.",
                param=f"messages.{i}.content",
            )
    max_tokens = body.max_completion_tokens or body.max_tokens
    tool = plan_tool_call(body.tools, body.tool_choice, body.messages)
    prompt = chat_prompt(body.messages)
    if body.tools:  # the chat template writes the tools' schemas into the prompt
        prompt = Prompt(prompt.tokens + count_tokens(json.dumps(body.tools)), prompt.text)
    params = _finish(body, max_tokens, [prompt], models, max_model_len)
    return params if tool is None else replace(params, tool=tool)


def _validate(model: type[_Body], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(x) for x in first["loc"]) or None
        raise ApiError(_summary(exc), param=param) from None


def _summary(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
    return "; ".join(dict.fromkeys(parts))


def _finish(
    body: _Body,
    max_tokens: int | None,
    prompts: list[Prompt],
    models: tuple[str, ...],
    max_model_len: int,
) -> Generate:
    if body.model is not None and body.model not in models:
        raise ApiError(
            f"The model `{body.model}` does not exist.", HTTPStatus.NOT_FOUND, param="model"
        )
    n = 1 if body.n is None else body.n
    if n < 1:
        raise ApiError(f"n must be at least 1, got {n}.", param="n")
    if max_tokens is not None and max_tokens < 1:
        raise ApiError(f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    if body.min_tokens < 0:
        raise ApiError(
            f"min_tokens must be greater than or equal to 0, got {body.min_tokens}.",
            param="min_tokens",
        )
    if max_tokens is not None and body.min_tokens > max_tokens:
        raise ApiError(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
            f"got {body.min_tokens}.",
            param="min_tokens",
        )
    if body.temperature is not None and body.temperature < 0:
        raise ApiError(
            f"temperature must be non-negative, got {body.temperature}.", param="temperature"
        )
    if body.stream_options is not None and not body.stream:
        raise ApiError(
            "Stream options can only be defined when `stream=True`.", param="stream_options"
        )
    caps = [_cap(p.tokens, max_tokens, max_model_len) for p in prompts]
    if body.min_tokens > min(caps):
        raise ApiError(
            f"min_tokens must be less than or equal to max_tokens={min(caps)}, "
            f"got {body.min_tokens}.",
            param="min_tokens",
        )
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    opts = body.stream_options
    return Generate(
        model=models[0],
        prompts=prompts,
        max_tokens=caps,
        n=n,
        ignore_eos=body.ignore_eos,
        min_tokens=body.min_tokens,
        stop=stop,
        include_stop=body.include_stop_str_in_output,
        stream=bool(body.stream),
        include_usage=bool(opts and opts.include_usage),
        continuous_usage=bool(opts and opts.include_usage and opts.continuous_usage_stats),
        priority=body.priority,
    )


def _cap(prompt_tokens: int, max_tokens: int | None, max_model_len: int) -> int:
    """vLLM's context check: the prompt must leave room for one token, and
    ``max_tokens`` (default: all the room left) must fit the context."""
    if prompt_tokens >= max_model_len:
        raise ApiError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the "
            "input messages.",
            param="input_tokens",
        )
    room = max_model_len - prompt_tokens
    if max_tokens is None:
        return room
    if max_tokens > room:
        raise ApiError(
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
            f"model's maximum context length is {max_model_len} tokens and your request has "
            f"{prompt_tokens} input tokens ({max_tokens} > {max_model_len} - {prompt_tokens}).",
            param="max_tokens",
        )
    return max_tokens
