"""What IDE assistants send besides plain chat, end to end through the gateway on saber-sim
with the ``openai`` SDK: tool calls (forced, chosen, streamed as vLLM streams them) and
embeddings (deterministic vectors). Issue 48: saber-sim ignored ``tools`` and had no
``/v1/embeddings``, so the gateway's relaying of either could not be tried."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from saber.gateway import RunningGateway
from saber.sim.http import RunningSim

TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the workspace.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "line": {"type": "integer"},
                    "mode": {"type": "string", "enum": ["text", "bytes"]},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "parameters": {"type": "object", "properties": {"verbose": {"type": "boolean"}}},
        },
    },
]
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What does main.py do?"}]
FORCED = {"type": "function", "function": {"name": "run_tests"}}


@pytest.fixture
def client(gateway: RunningGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)


@pytest.mark.parametrize(
    ("tool_choice", "name", "finish"),
    [("auto", "read_file", "tool_calls"), ("required", "read_file", "tool_calls"),
     (FORCED, "run_tests", "stop")],
)  # fmt: skip
def test_a_tool_call_comes_back_whole(
    client: openai.OpenAI, sim: RunningSim, tool_choice: Any, name: str, finish: str
) -> None:
    """Chosen (auto, the user's turn), required, or forced by name (finishing with stop,
    as OpenAI's does): a call with an id, the function's name and JSON arguments that
    hold every property of its schema."""
    out = client.chat.completions.create(
        model=sim.model, messages=ASK, tools=TOOLS, tool_choice=tool_choice
    )
    choice = out.choices[0]
    assert choice.finish_reason == finish and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("chatcmpl-tool-")
    assert call.function.name == name
    args = json.loads(call.function.arguments)
    if name == "read_file":
        assert set(args) == {"path", "line", "mode"} and args["mode"] == "text"
        assert isinstance(args["path"], str) and isinstance(args["line"], int)
    else:
        assert args == {"verbose": True}
    assert out.usage is not None and out.usage.completion_tokens > 0


def test_a_streamed_tool_call_arrives_as_vllm_sends_it(
    client: openai.OpenAI, sim: RunningSim
) -> None:
    """The first delta carries the call's id, type and name with empty arguments; the
    rest carry argument fragments only, which join to the JSON of a whole answer."""
    stream = client.chat.completions.create(
        model=sim.model,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        stream=True,
        stream_options={"include_usage": True},
    )
    deltas = []
    finish = None
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            deltas += choice.delta.tool_calls or []
            finish = choice.finish_reason or finish
    head, *fragments = deltas
    assert head.id and head.id.startswith("chatcmpl-tool-") and head.type == "function"
    assert head.function is not None and head.function.name == "read_file"
    assert head.function.arguments == ""
    assert fragments and all(d.id is None and d.index == 0 for d in fragments)
    assert all(d.function is not None and d.function.name is None for d in fragments)
    arguments = "".join(d.function.arguments or "" for d in fragments if d.function)
    assert set(json.loads(arguments)) == {"path", "line", "mode"}
    assert finish == "tool_calls"
    assert usage is not None and usage.completion_tokens == len(fragments)


def test_after_the_tools_result_it_answers_in_text(client: openai.OpenAI, sim: RunningSim) -> None:
    """An agent's loop: call, result, then text (under auto); none never calls."""
    first = client.chat.completions.create(model=sim.model, messages=ASK, tools=TOOLS)
    (call,) = first.choices[0].message.tool_calls or []
    then: list[ChatCompletionMessageParam] = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},  # type: ignore[list-item]
        {"role": "tool", "tool_call_id": call.id, "content": "print('hello')"},
    ]
    answer = client.chat.completions.create(
        model=sim.model, messages=then, tools=TOOLS, max_tokens=20
    )
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls
    plain = client.chat.completions.create(
        model=sim.model, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=20
    )
    assert plain.choices[0].message.content and not plain.choices[0].message.tool_calls


def test_an_unknown_forced_tool_is_an_openai_shaped_400(
    client: openai.OpenAI, sim: RunningSim
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=sim.model,
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "deploy"}},
        )
    assert "'deploy'" in info.value.message
    assert isinstance(info.value.body, dict) and info.value.body["type"] == "invalid_request_error"


def _vector(embedding: Any) -> np.ndarray:
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding), dtype="<f4")
    return np.asarray(embedding)


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_embeddings_through_the_gateway(
    client: openai.OpenAI, sim: RunningSim, encoding: Any
) -> None:
    """Deterministic unit vectors, one per input, with usage. Asked for base64, the SDK
    hands the string back as it came (it decodes only when it chose base64 itself, as it
    does by default: the dimensions test below)."""
    texts = ["def add(a, b):", "return a + b", "def add(a, b):"]
    out = client.embeddings.create(model=sim.model, input=texts, encoding_format=encoding)
    vectors = [_vector(d.embedding) for d in out.data]
    assert [d.index for d in out.data] == [0, 1, 2] and out.model == sim.model
    assert all(v.shape == (384,) and abs(np.linalg.norm(v) - 1) < 1e-5 for v in vectors)
    assert np.allclose(vectors[0], vectors[2]) and not np.allclose(vectors[0], vectors[1])
    assert out.usage.prompt_tokens == out.usage.total_tokens == 3 + 4 + 3
    again = client.embeddings.create(model=sim.model, input="return a + b", dimensions=16)
    assert len(again.data[0].embedding) == 16


def test_embeddings_of_an_unknown_model_is_an_openai_shaped_404(
    client: openai.OpenAI,
) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.embeddings.create(model="nope", input="x")
    assert "nope" in info.value.message
    assert isinstance(info.value.body, dict) and info.value.body["type"] == "not_found_error"
