"""Chat and completions, streaming and not, through a real gateway to a real saber-sim,
with the official openai SDK as the client."""

from __future__ import annotations

import json

import httpx
import pytest
from gateway_support import GatewayFactory, sim_running
from openai import OpenAI

from harness import metric_value, wait_for
from saber.gateway import RunningGateway
from saber.sim.http import RunningSim

MESSAGES = [{"role": "user", "content": "Write a function that reverses a string."}]


@pytest.fixture
def client(gateway: RunningGateway) -> OpenAI:
    return OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)


def test_chat_non_streaming(client: OpenAI, sim: RunningSim) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=sim.model, messages=MESSAGES, max_tokens=12
    )
    resp = raw.parse()
    assert resp.choices[0].message.content
    assert resp.usage is not None and resp.usage.completion_tokens == 12
    assert raw.headers["x-saber-task"] == "code_generation"  # the default task
    assert raw.headers["x-saber-outcome"] == "admitted"
    assert float(raw.headers["x-saber-queue-ms"]) >= 0


def test_chat_streaming_without_usage_has_no_usage_chunk(client: OpenAI, sim: RunningSim) -> None:
    chunks = list(
        client.chat.completions.create(
            model=sim.model, messages=MESSAGES, max_tokens=10, stream=True
        )
    )
    assert all(c.choices for c in chunks), "the usage chunk the gateway asked for must not leak"
    assert all(c.usage is None for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text


def test_chat_streaming_with_usage_keeps_it(client: OpenAI, sim: RunningSim) -> None:
    chunks = list(
        client.chat.completions.create(
            model=sim.model,
            messages=MESSAGES,
            max_tokens=10,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 10


def test_completions_non_streaming_and_streaming(client: OpenAI, sim: RunningSim) -> None:
    resp = client.completions.create(model=sim.model, prompt="def add(a, b):", max_tokens=8)
    assert resp.choices[0].text
    assert resp.usage is not None and resp.usage.completion_tokens == 8
    stream = client.completions.create(
        model=sim.model, prompt="def add(a, b):", max_tokens=8, stream=True
    )
    text = "".join(c.choices[0].text for c in stream if c.choices)
    assert text


def test_task_from_header_alias_rule_and_default(
    client: OpenAI, sim: RunningSim, gateway: RunningGateway
) -> None:
    def task_of(raw: object) -> str:
        return raw.headers["x-saber-task"]  # type: ignore[attr-defined]

    chat = client.chat.completions.with_raw_response
    comp = client.completions.with_raw_response
    # 1. the header wins over everything, even an alias
    raw = chat.create(
        model=f"{sim.model}:code_translation",
        messages=MESSAGES,
        max_tokens=4,
        extra_headers={"X-Saber-Task": "code_summary"},
    )
    assert task_of(raw) == "code_summary"
    assert raw.parse().model == sim.model  # the alias was rewritten to the real model
    # 2. "<model>:<task>" and configured aliases
    assert (
        task_of(chat.create(model=f"{sim.model}:code_qna", messages=MESSAGES, max_tokens=4))
        == "code_qna"
    )
    raw = comp.create(model="autocomplete", prompt="x = ", max_tokens=200)
    assert task_of(raw) == "code_completion"
    assert raw.parse().model == sim.model
    # 3. a rule: short /v1/completions are code completion
    assert task_of(comp.create(model=sim.model, prompt="x = ", max_tokens=16)) == "code_completion"
    # 4. the default
    assert task_of(comp.create(model=sim.model, prompt="x = ", max_tokens=400)) == "code_generation"


def test_models_lists_backend_models_and_aliases(client: OpenAI, sim: RunningSim) -> None:
    ids = [m.id for m in client.models.list()]
    assert sim.model in ids
    assert {"autocomplete", "chat", f"{sim.model}:code_qna", f"{sim.model}:code_completion"} <= set(
        ids
    )


def test_health_status_and_metrics(
    client: OpenAI, sim: RunningSim, gateway: RunningGateway
) -> None:
    client.chat.completions.create(model=sim.model, messages=MESSAGES, max_tokens=5)
    health = httpx.get(gateway.url + "/health")
    assert health.status_code == 200
    assert health.json()["backend"]["reachable"] is True
    status = httpx.get(gateway.url + "/saber/status").json()
    assert status["load"] == 0
    assert set(status["queues"]) >= {"code_qna", "code_completion"}
    assert status["queues"]["code_qna"] == {"high": 0, "low": 0}
    assert status["predicted_speed_tokens_per_s"]["max"] == pytest.approx(
        600.0 * status["calibration"], rel=1e-4
    )
    assert status["learning"]["refit"] is True and status["learning"]["swaps"] == 0
    assert status["tasks"]["code_generation"]["learned_output_tokens"]["observed"] == 1
    assert status["profile"]["kind"] == "usl" and status["profile"]["default"] is False
    assert status["recent_decisions"][-1]["action"] == "admit"
    text = httpx.get(gateway.url + "/metrics").text
    assert metric_value(text, "saber_requests_total", task="code_generation", outcome="served") == 1
    assert metric_value(text, "saber_generated_tokens_total", task="code_generation") == 5


def test_unknown_body_fields_pass_through(gateway: RunningGateway, sim: RunningSim) -> None:
    # The sim echoes nothing back, so check the bytes the gateway sends upstream:
    # without a rewrite they are the client's own bytes.
    body = b'{"model": "%s", "prompt": "a", "max_tokens": 3, "x_vendor": {"k": [1, 2.50]}}' % (
        sim.model.encode()
    )
    resp = httpx.post(gateway.url + "/v1/completions", content=body)
    assert resp.status_code == 200, resp.text
    assert json.loads(resp.content)["usage"]["completion_tokens"] == 3


def test_httpx_transport_serves_and_aborts(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    """The other upstream client (httpx's own pool) does the same job."""
    gw = gateway_factory(sim.url, **{"backend.transport": "httpx"})
    client = OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)
    resp = client.chat.completions.create(model=sim.model, messages=MESSAGES, max_tokens=6)
    assert resp.usage is not None and resp.usage.completion_tokens == 6
    chunks = list(client.completions.create(model=sim.model, prompt="x", max_tokens=6, stream=True))
    assert all(c.choices for c in chunks)
    body = {"model": sim.model, "prompt": "x", "max_tokens": 5000, "ignore_eos": True}
    with httpx.stream("POST", gw.url + "/v1/completions", json={**body, "stream": True}) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
    wait_for(
        lambda: (sim_running(sim), gw.gateway.scheduler.load),
        lambda held: held == (0, 0),
        describe="saber-sim and the scheduler idle (running there, load here)",
    )
