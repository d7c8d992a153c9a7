"""saber-sim's tool calls and embeddings on the wire: what vLLM refuses, what a cap cuts,
and vectors that are the same for the same input."""

from __future__ import annotations

import json

import httpx
import pytest

from saber.sim.http import RunningSim
from saber.sim.http.responses.tools import ToolCall, arguments_for, plan_tool_call, tool_answer

TOOL = {
    "type": "function",
    "function": {
        "name": "grep",
        "parameters": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "paths": {"type": "array", "items": {"type": "string"}},
                "options": {
                    "type": "object",
                    "properties": {"limit": {"type": ["integer", "null"]}, "exact": {"const": 1}},
                },
            },
        },
    },
}
USER = [{"role": "user", "content": "find it"}]


def test_arguments_follow_the_schema_every_time() -> None:
    schema = TOOL["function"]["parameters"]  # type: ignore[index]
    args = arguments_for(schema)
    assert args == arguments_for(schema)
    assert set(args) == {"pattern", "paths", "options"}
    assert isinstance(args["pattern"], str) and isinstance(args["paths"][0], str)
    assert args["options"] == {"limit": 1, "exact": 1}


@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        (None, "required", "`tools` must be set"),
        (None, {"type": "function", "function": {"name": "grep"}}, "`tools` must be set"),
        ([TOOL], {"type": "function", "function": {"name": "sed"}}, "does not match"),
        ([TOOL], {"function": {"name": "grep"}}, "named tool_choice"),
        ([TOOL], "sometimes", "tool_choice must be"),
        ([{"type": "retrieval"}], "auto", "must be a function tool"),
        ([{"type": "function", "function": {}}], "auto", "function.name is required"),
    ],
)
def test_what_vllm_refuses_is_a_400(
    sim: RunningSim, tools: object, choice: object, message: str
) -> None:
    body = {"model": sim.model, "messages": USER, "tool_choice": choice}
    if tools is not None:
        body["tools"] = tools
    resp = httpx.post(f"{sim.api_url}/chat/completions", json=body)
    assert resp.status_code == 400 and message in resp.json()["error"]["message"]


def test_who_calls_what() -> None:
    assert plan_tool_call([TOOL], None, USER) is not None  # tools given: auto
    assert plan_tool_call([TOOL], "none", USER) is None
    assert plan_tool_call(None, "auto", USER) is None  # no tools: a text answer
    after = [*USER, {"role": "tool", "content": "x", "tool_call_id": "1"}]
    assert plan_tool_call([TOOL], "auto", after) is None
    forced = plan_tool_call([TOOL], "required", after)
    assert forced is not None and forced.name == "grep" and not forced.named


def test_a_call_cut_by_max_tokens_finishes_with_length(sim: RunningSim) -> None:
    call = ToolCall("grep", json.dumps({"pattern": "a b c d e f"}), named=False)
    assert tool_answer(call, 100).finish_reason == "tool_calls"
    cut = tool_answer(call, 3)
    assert (cut.tokens, cut.finish_reason) == (3, "length")
    body = {"model": sim.model, "messages": USER, "tools": [TOOL], "max_tokens": 2}
    out = httpx.post(f"{sim.api_url}/chat/completions", json=body).json()
    choice = out["choices"][0]
    assert choice["finish_reason"] == "length" and out["usage"]["completion_tokens"] == 2
    arguments = choice["message"]["tool_calls"][0]["function"]["arguments"]
    assert arguments.startswith("{") and not arguments.endswith("}")


def test_embeddings_answer_and_refuse_as_openai(sim: RunningSim) -> None:
    url = f"{sim.api_url}/embeddings"
    one = httpx.post(url, json={"model": sim.model, "input": [1, 2, 3]}).json()
    two = httpx.post(url, json={"input": [[1, 2, 3]], "dimensions": 8}).json()
    assert one["object"] == "list" and one["usage"]["prompt_tokens"] == 3
    assert len(one["data"][0]["embedding"]) == 384 and len(two["data"][0]["embedding"]) == 8
    assert one["data"][0]["embedding"][:8] != two["data"][0]["embedding"]  # its own length
    for bad, param in [
        ({"input": []}, "input"),
        ({"input": [1, "a"]}, "input"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
    ]:
        resp = httpx.post(url, json=bad)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param
    resp = httpx.post(url, json={"model": "nope", "input": "x"})
    assert resp.status_code == 404
