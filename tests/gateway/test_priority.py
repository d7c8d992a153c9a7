"""The admission tier as vLLM's request priority (``backend.forward_priority``)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
from fake_vllm import MODEL, FakeVllm
from gateway_support import UNCAPPED, GatewayFactory, start_fake

from saber.gateway import RunningGateway

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
# 20,000 tokens exactly (ignore_eos): the gateway knows it cannot be on time, and the
# idle engine serves it demoted.
LONG = {**CHAT, "max_tokens": 20000, "ignore_eos": True}
SHORT = {**CHAT, "max_tokens": 5}


def _send(gw: RunningGateway, body: dict[str, Any]) -> str:
    resp = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.headers["x-saber-outcome"]


def test_on_time_work_is_priority_0_and_demoted_work_priority_1(
    gateway_factory: GatewayFactory,
) -> None:
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake, **{"backend.forward_priority": True}, **UNCAPPED)
    assert _send(gw, SHORT) == "admitted"
    assert _send(gw, LONG) == "admitted_demoted"
    api = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
    # A client's own priority is replaced by the tier the gateway admitted it from.
    api.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "x"}],
        max_tokens=5,
        extra_body={"priority": -5},
    )
    sent = [body for body, _ in fake.posts]
    assert [body["priority"] for body in sent] == [0, 1, 0]
    assert {k: v for k, v in sent[0].items() if k != "priority"} == SHORT


def test_off_by_default_the_client_body_goes_as_it_came(gateway_factory: GatewayFactory) -> None:
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake, **UNCAPPED)
    assert _send(gw, LONG) == "admitted_demoted"
    assert _send(gw, {**SHORT, "priority": 3}) == "admitted"
    assert [body for body, _ in fake.posts] == [LONG, {**SHORT, "priority": 3}]


def test_never_sent_to_llamacpp(gateway_factory: GatewayFactory) -> None:
    fake = FakeVllm()
    overrides = {"backend.forward_priority": True, "backend.kind": "llamacpp"}
    gw = start_fake(gateway_factory, fake, **overrides)
    assert _send(gw, SHORT) == "admitted"
    assert "priority" not in fake.posts[0][0]
