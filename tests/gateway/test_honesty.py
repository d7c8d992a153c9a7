"""Task honesty: a request is scheduled as its task type (and so its deadline and
priority), and may not ask for more tokens than that task allows, however the task was
picked; a request that generates more than its task allows is counted."""

from __future__ import annotations

import httpx
import pytest
from fake_vllm import MODEL, FakeVllm
from gateway_support import GatewayFactory, offered, start_fake

from harness import metric_value
from saber.sim.http import RunningSim

SUMMARY = {"x-saber-task": "code_summary"}  # max_tokens 128, expects 30


def test_a_named_task_cannot_ask_for_more_than_its_cap(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    """Defect 7 (issue 14): ``X-Saber-Task`` (or ``<model>:<task>``) picked any task and
    its max_tokens was not enforced: a code_summary asking for 3000 tokens was
    scheduled as 30 and generated 3000. Now it is clamped to code_summary's 128, by
    header and by alias, and the engine generates no more."""
    gw = gateway_factory(sim.url, trace=True)
    url = gw.url + "/v1/completions"
    body = {"model": sim.model, "prompt": "x", "max_tokens": 3000, "ignore_eos": True}
    by_header = httpx.post(url, json=body, headers=SUMMARY, timeout=30).json()
    by_alias = httpx.post(
        url, json={**body, "model": f"{sim.model}:code_summary"}, timeout=30
    ).json()
    assert by_header["usage"]["completion_tokens"] == 128
    assert by_alias["usage"]["completion_tokens"] == 128
    assert [r.cap for r in offered(gw)] == [128, 128]
    text = httpx.get(gw.url + "/metrics").text
    assert metric_value(text, "saber_task_overrun_total", task="code_summary") == 0


def test_reject_mode_names_the_field(gateway_factory: GatewayFactory) -> None:
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake, task_max_tokens="reject")
    url = gw.url + "/v1/chat/completions"
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    for field in ("max_tokens", "max_completion_tokens"):
        resp = httpx.post(url, json={**chat, field: 129}, headers=SUMMARY)
        assert resp.status_code == 400
        err = resp.json()["error"]
        assert err["param"] == field and err["code"] == "max_tokens_above_task_cap"
    assert httpx.post(url, json={**chat, "max_tokens": 128}, headers=SUMMARY).status_code == 200
    # Without a cap of its own it is given the task's.
    assert httpx.post(url, json=chat, headers=SUMMARY).status_code == 200
    assert [p[0].get("max_tokens") for p in fake.posts] == [128, 128]
    # Picked by the default task (code_generation, 1024), it is capped all the same.
    resp = httpx.post(url, json={**chat, "max_tokens": 5000})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "max_tokens"


NAMINGS = [
    # (how the task is named, the request's model, its headers): all code_qna (cap 256)
    ("header", MODEL, {"x-saber-task": "code_qna"}),
    ("model:task", f"{MODEL}:code_qna", {}),
    ("alias", "chat", {}),
]


@pytest.mark.parametrize("mode", ["clamp", "reject"])
def test_the_same_request_gets_the_same_answer_however_its_task_is_named(
    gateway_factory: GatewayFactory, mode: str
) -> None:
    """Issue 48: max_tokens=100000 was clamped under X-Saber-Task: code_qna and
    ``<model>:code_qna`` but went to the backend as it came (a 400 there) under the
    alias ``chat``, which names the same task. Now each way, and the default task
    too, gets the same answer: clamped to the task's cap, or a 400 naming the field."""
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake, task_max_tokens=mode)
    url = gw.url + "/v1/chat/completions"
    answers = []
    for _, model, headers in NAMINGS:
        chat = {"model": model, "messages": [{"role": "user", "content": "x"}]}
        resp = httpx.post(url, json={**chat, "max_tokens": 100_000}, headers=headers)
        assert resp.headers["x-saber-task"] == "code_qna"
        answers.append((resp.status_code, resp.json().get("error", {}).get("code")))
    if mode == "clamp":
        assert answers == [(200, None)] * 3
        assert [p[0]["max_tokens"] for p in fake.posts] == [256] * 3
        assert {p[0]["model"] for p in fake.posts} == {MODEL}
    else:
        assert answers == [(400, "max_tokens_above_task_cap")] * 3 and not fake.posts
    # The default task (a plain model name) and a rule are held to their task's cap too.
    plain = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 5000}
    resp = httpx.post(url, json=plain)
    assert resp.headers["x-saber-task"] == "code_generation"
    if mode == "clamp":
        assert resp.status_code == 200 and fake.posts[-1][0]["max_tokens"] == 1024
    else:
        assert resp.status_code == 400


def test_clamp_lowers_every_cap_and_the_floor(gateway_factory: GatewayFactory) -> None:
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake)
    body = {
        "model": f"{MODEL}:code_summary",
        "prompt": "x",
        "max_tokens": 900,
        "max_completion_tokens": 100,
        "min_tokens": 500,
    }
    assert httpx.post(gw.url + "/v1/completions", json=body).status_code == 200
    sent = fake.posts[0][0]
    assert sent["max_tokens"] == 128 and sent["max_completion_tokens"] == 100
    assert sent["min_tokens"] == 128 and sent["model"] == MODEL


def test_off_lets_it_through_and_overruns_are_counted(gateway_factory: GatewayFactory) -> None:
    fake = FakeVllm(tokens=300)
    gw = start_fake(gateway_factory, fake, task_max_tokens="off")
    body = {"model": MODEL, "prompt": "x", "max_tokens": 3000}
    for stream in (False, True):
        resp = httpx.post(
            gw.url + "/v1/completions", json={**body, "stream": stream}, headers=SUMMARY
        )
        assert resp.status_code == 200
    assert [p[0]["max_tokens"] for p in fake.posts] == [3000, 3000]
    text = httpx.get(gw.url + "/metrics").text
    assert metric_value(text, "saber_task_overrun_total", task="code_summary") == 2
    assert metric_value(text, "saber_task_overrun_total", task="code_qna") == 0


@pytest.mark.parametrize("mode", ["clamp", "reject"])
def test_a_keys_cap_applies_to_every_request(gateway_factory: GatewayFactory, mode: str) -> None:
    fake = FakeVllm()
    keys = [{"name": "small", "key": "sk-small", "max_tokens": 16}]
    gw = start_fake(gateway_factory, fake, api_keys=keys, task_max_tokens=mode)
    resp = httpx.post(
        gw.url + "/v1/completions",
        json={"model": MODEL, "prompt": "x", "max_tokens": 400},
        headers={"authorization": "Bearer sk-small"},
    )
    if mode == "clamp":
        assert resp.status_code == 200 and fake.posts[0][0]["max_tokens"] == 16
    else:
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "max_tokens"
