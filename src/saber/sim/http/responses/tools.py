"""Tool calls, as vLLM makes them: whether a chat request calls a function, and with what.

A chat request with ``tools`` calls one when ``tool_choice`` forces it (``required``:
the first tool; ``{"type": "function", "function": {"name": N}}``: that one) or, under
``auto`` (the default when tools are given, as vLLM with ``--enable-auto-tool-choice``),
when the last message is the user's: an agent's loop then goes tool call, tool result,
answer in text. ``none`` never calls one.

The arguments are JSON built from the function's parameter schema: every property,
each given a value of its type (the first of an ``enum``), the same for the same
schema. They are generated as the engine's tokens, one whitespace-separated piece of
the JSON text a token, and streamed as vLLM streams a tool call: a first delta with
the call's ``id``, ``type``, ``function.name`` and empty ``arguments``, then the
arguments piece by piece. A call cut off by ``max_tokens`` ends with ``length`` and
arguments that are not whole JSON, as a real model's would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from saber.sim.http.responses.errors import ApiError
from saber.sim.http.responses.text import Answer

MAX_DEPTH = 4
"""Nested objects and arrays beyond this are given as empty."""

_PIECE = re.compile(r"\s*\S+")


@dataclass(frozen=True)
class ToolCall:
    """The function a request calls, and its arguments as JSON text."""

    name: str
    arguments: str
    named: bool
    """Forced by name: it finishes with ``stop``, as OpenAI's does; else ``tool_calls``."""


def plan_tool_call(
    tools: Sequence[Any] | None, tool_choice: Any, messages: Sequence[Mapping[str, Any]]
) -> ToolCall | None:
    """The call a chat request makes, or None for a text answer; ApiError (400) for
    ``tools`` or a ``tool_choice`` that vLLM refuses."""
    functions = _functions(tools)
    choice = "auto" if tool_choice is None and functions else tool_choice
    if choice is None or choice == "none":
        return None
    if isinstance(choice, Mapping):
        name = _named(choice)
        if not functions:
            raise ApiError("When using `tool_choice`, `tools` must be set.", param="tool_choice")
        if name not in functions:
            raise ApiError(
                f"The tool {name!r} specified in `tool_choice` does not match any of the "
                "specified `tools`.",
                param="tool_choice",
            )
        return ToolCall(name, json.dumps(arguments_for(functions[name])), named=True)
    if choice not in ("auto", "required"):
        raise ApiError(
            f"tool_choice must be 'none', 'auto', 'required' or a named function, got {choice!r}.",
            param="tool_choice",
        )
    if not functions:
        if choice == "required":
            raise ApiError("When using `tool_choice`, `tools` must be set.", param="tool_choice")
        return None
    last = messages[-1].get("role") if messages else None
    if choice == "auto" and last != "user":
        return None  # a tool's result (or the model's own turn) came last: answer in text
    name = next(iter(functions))
    return ToolCall(name, json.dumps(arguments_for(functions[name])), named=False)


def _functions(tools: Sequence[Any] | None) -> dict[str, Mapping[str, Any]]:
    """Each tool's name and parameter schema, in order."""
    out: dict[str, Mapping[str, Any]] = {}
    for i, tool in enumerate(tools or ()):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            raise ApiError(f"tools[{i}] must be a function tool.", param=f"tools.{i}")
        if not isinstance(name, str) or not name:
            raise ApiError(f"tools[{i}].function.name is required.", param=f"tools.{i}.function")
        assert isinstance(function, Mapping)
        params = function.get("parameters")
        out[name] = params if isinstance(params, Mapping) else {}
    return out


def _named(choice: Mapping[str, Any]) -> str:
    function = choice.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    if choice.get("type") != "function" or not isinstance(name, str):
        raise ApiError(
            'A named tool_choice is {"type": "function", "function": {"name": ...}}.',
            param="tool_choice",
        )
    return name


def arguments_for(schema: Mapping[str, Any], depth: int = 0) -> Any:
    """A value that the JSON schema ``schema`` accepts, the same every time."""
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties")
        if depth >= MAX_DEPTH or not isinstance(props, Mapping):
            return {}
        return {
            str(name): arguments_for(sub if isinstance(sub, Mapping) else {}, depth + 1)
            for name, sub in props.items()
        }
    if kind == "array":
        items = schema.get("items")
        if depth >= MAX_DEPTH or not isinstance(items, Mapping):
            return []
        return [arguments_for(items, depth + 1)]
    return {"integer": 1, "number": 1.5, "boolean": True, "null": None}.get(
        str(kind), "def return self value"
    )


def tool_answer(call: ToolCall, max_tokens: int) -> Answer:
    """The tokens of a call's arguments: one whitespace-separated piece of JSON each, at
    most ``max_tokens`` of them."""
    ends: list[int] = []
    for match in _PIECE.finditer(call.arguments):
        ends.append(match.end())
    ends = ends or [len(call.arguments)]
    whole = len(ends) <= max_tokens
    tokens = len(ends) if whole else max_tokens
    finish = ("stop" if call.named else "tool_calls") if whole else "length"
    return Answer(tokens, finish, None, call.arguments, tuple(ends))
