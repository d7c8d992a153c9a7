"""A stream turned away after its 200 (it waited with ``: queued`` comments, then could no
longer be served in time) ends in the shape vLLM sends mid-stream, which the clients
read as an error with the message and its retry hint; Tabby's parsers, ported here
from crates/http-api-bindings and async-openai, read it without failing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from gateway_support import LONG_TOKENS, UNCAPPED, GatewayFactory

from saber import wire
from saber.gateway import RunningGateway
from saber.sim.http import RunningSim

FIM = "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n<|fim_middle|>"


class TabbyPanic(Exception):
    """Where Tabby's Rust code would panic (an ``expect`` on a failed parse)."""


def sse_messages(lines: Iterator[str]) -> Iterator[str]:
    """Events' data as eventsource-stream (reqwest-eventsource) hands them over: comment
    lines skipped, ``data:`` lines joined, an event at each blank line."""
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield "\n".join(data)
            data = []
        elif line.startswith(":"):
            continue
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)


def tabby_completion(lines: Iterator[str]) -> list[str]:
    """Tabby's ``vllm/completion`` and ``openai/completion`` loop (completion/openai.rs):
    every message is parsed as ``{choices: [{text, finish_reason?}]}`` or it panics;
    the first choice's text is yielded; a finish_reason ends the loop."""
    out = []
    for data in sse_messages(lines):
        try:
            chunk = json.loads(data)
            choices = chunk["choices"]
            assert isinstance(choices, list)
            for choice in choices:
                assert isinstance(choice["text"], str)
                assert choice.get("finish_reason") is None or isinstance(
                    choice["finish_reason"], str
                )
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            raise TabbyPanic(f"Failed to parse response: {data!r}") from exc
        if choices:
            out.append(choices[0]["text"])
            if choices[0].get("finish_reason") is not None:
                break
    return out


def async_openai_chat(lines: Iterator[str]) -> list[Any]:
    """async-openai's stream (Tabby's ``openai/chat``): [DONE] ends it; a message that is
    not a CreateChatCompletionStreamResponse becomes an Err item, which Tabby's chat
    route turns into the end of its own stream. Nothing panics."""
    items: list[Any] = []
    for data in sse_messages(lines):
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
            fields = (("id", str), ("choices", list), ("created", int), ("model", str))
            assert all(isinstance(chunk[k], t) for k, t in fields)
            items.append(chunk)
        except (ValueError, KeyError, TypeError, AssertionError):
            items.append(("Err", "JSONDeserialize", data))
    return items


def turned_away(sim: RunningSim, gateway_factory: GatewayFactory) -> RunningGateway:
    """A gateway with one slot, and code completion and QnA useful for 1.5 s, so that a
    stream waiting behind a long one is turned away after its 200."""
    return gateway_factory(
        sim.url,
        max_concurrency=1,
        queued_comment_interval_s=0.1,
        **{"tasks.code_completion.useful_s": 1.5, "tasks.code_qna.useful_s": 1.5},
        **UNCAPPED,
    )


def _queued_lines(
    gw: RunningGateway, sim: RunningSim, path: str, body: dict[str, Any]
) -> list[str]:
    long = {"model": sim.model, "prompt": "x", "max_tokens": LONG_TOKENS, "ignore_eos": True}
    with (
        httpx.Client(timeout=30) as a,
        a.stream("POST", gw.url + "/v1/completions", json={**long, "stream": True}),
        httpx.stream("POST", gw.url + path, json=body, timeout=10) as r,
    ):
        assert r.status_code == 200 and r.headers["x-saber-outcome"] == "queued"
        return list(r.iter_lines())


def test_tabbys_completion_client_ends_quietly(
    sim: RunningSim, gateway_factory: GatewayFactory
) -> None:
    gw = turned_away(sim, gateway_factory)
    body = {"model": sim.model, "prompt": FIM, "suffix": None, "max_tokens": 64, "stream": True}
    lines = _queued_lines(gw, sim, "/v1/completions", body)
    assert lines[0] == ": queued"
    assert tabby_completion(iter(lines)) == [""]  # no suggestion, no panic
    event = json.loads(next(m for m in sse_messages(iter(lines)) if m.startswith("{")))
    assert event["error"]["code"] == "rejected_expired" and wire.is_openai_error(event)
    assert "retry in about" in event["error"]["message"]
    # vLLM's own shape, without the finished choice, would make it panic.
    bare = [f"data: {json.dumps({'error': event['error']})}", "", "data: [DONE]", ""]
    with pytest.raises(TabbyPanic):
        tabby_completion(iter(bare))


def test_tabbys_chat_client_gets_an_error_item(
    sim: RunningSim, gateway_factory: GatewayFactory
) -> None:
    gw = turned_away(sim, gateway_factory)
    body = {"model": "chat", "messages": [{"role": "user", "content": "x"}], "stream": True}
    lines = _queued_lines(gw, sim, "/v1/chat/completions", {**body, "max_tokens": 8})
    items = async_openai_chat(iter(lines))
    assert items and items[-1][:2] == ("Err", "JSONDeserialize")


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_the_openai_sdk_raises_it_with_the_message(
    sim: RunningSim, gateway_factory: GatewayFactory, path: str
) -> None:
    gw = turned_away(sim, gateway_factory)
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
    long = {"model": sim.model, "prompt": "x", "max_tokens": LONG_TOKENS, "ignore_eos": True}
    with (
        httpx.Client(timeout=30) as a,
        a.stream("POST", gw.url + "/v1/completions", json={**long, "stream": True}),
        pytest.raises(openai.APIError) as info,
    ):
        if path == "/v1/completions":
            stream: Any = client.completions.create(
                model=sim.model, prompt=FIM, max_tokens=64, stream=True
            )
        else:
            stream = client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "x"}], stream=True
            )
        list(stream)
    err = info.value
    assert "retry in about" in err.message and "useful_s" in err.message
    assert isinstance(err.body, dict) and err.body["code"] == "rejected_expired"
    assert err.body["type"] == "server_error"
