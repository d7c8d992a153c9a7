"""One finish per request, whatever breaks: an exception at every step of an exchange
ends in one clean internal error, the scheduler as if the request had never come,
and a gateway that goes on serving. The request of issue 12 that used to pin the
load for ever is refused at the door."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from gateway_support import held, idle
from injection import STEPS, Injector, applies, counts

from harness import wait_for
from saber.gateway import RunningGateway
from saber.sim.http import RunningSim

MESSAGES = [{"role": "user", "content": "hello"}]
TOKENS = 8


@pytest.fixture
def injector(gateway: RunningGateway) -> Iterator[Injector]:
    inj = Injector(gateway)
    yield inj
    inj.disarm()


def chat(gw: RunningGateway, sim: RunningSim, stream: bool) -> None:
    """One request through the official SDK, read to the end."""
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
    args = {"model": sim.model, "messages": MESSAGES, "max_tokens": TOKENS, "stream": stream}
    if stream:
        chunks = list(client.chat.completions.create(**args, extra_body={"ignore_eos": True}))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        done = client.chat.completions.create(**args, extra_body={"ignore_eos": True})
        assert done.usage is not None and done.usage.completion_tokens == TOKENS


CASES = [(step, stream) for step in STEPS for stream in (False, True) if applies(step, stream)]


@pytest.mark.parametrize(
    ("step", "stream"), CASES, ids=[f"{s}-{'stream' if t else 'whole'}" for s, t in CASES]
)
def test_an_exception_at_any_step_ends_in_one_internal_error(
    gateway: RunningGateway, sim: RunningSim, injector: Injector, step: str, stream: bool
) -> None:
    before = counts(gateway)
    injector.arm(step)
    with pytest.raises(openai.APIError) as info:
        chat(gateway, sim, stream)
    assert injector.fired == 1
    err = info.value
    if isinstance(err, openai.APIStatusError):  # nothing had been sent yet: a whole 500
        assert err.status_code == 500
        assert err.response.headers["x-saber-outcome"] == "internal_error"
    else:  # a stream already begun: its last event
        assert stream and step in ("first_frame", "middle_frame", "last_frame", "release")
    assert isinstance(err.body, dict)
    # Whole or mid-stream, the same OpenAI shape (issue 48).
    assert err.body["code"] == "internal_error" and err.body["type"] == "server_error"
    assert err.body["message"].startswith("internal error")

    wait_for(lambda: idle(gateway, sim), describe=lambda: held(gateway, sim))
    after = counts(gateway)
    assert after["total"] == before["total"] + 1, "counted other than once"
    assert after["internal_error"] == before["internal_error"] + 1
    assert after["in_flight"] == 0 and after["queued"] == 0
    chat(gateway, sim, stream)  # and the next one is served
    assert counts(gateway)["total"] == before["total"] + 2


@pytest.mark.parametrize("step", ["middle_frame", "release"])
def test_a_begun_stream_ends_with_an_error_event_then_done(
    gateway: RunningGateway, sim: RunningSim, injector: Injector, step: str
) -> None:
    injector.arm(step)
    body = {"model": sim.model, "messages": MESSAGES, "max_tokens": TOKENS, "stream": True}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and lines.count("data: [DONE]") == 1
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert (error["code"], error["type"]) == ("internal_error", "server_error")
    assert error["message"].startswith("internal error")
    wait_for(lambda: idle(gateway, sim), describe=lambda: held(gateway, sim))


def test_min_tokens_beyond_any_engine_is_refused_and_harms_nothing(
    gateway: RunningGateway, sim: RunningSim
) -> None:
    """Issue 12: ``"min_tokens": 1`` and 400 zeros once raised inside the scheduler and
    left the request in the HPQ for ever; now it is a 400 that names the field."""
    before = counts(gateway)
    raw = (
        b'{"model": "' + sim.model.encode() + b'", "messages": [{"role": "user", "content": "x"}],'
        b' "min_tokens": 1' + b"0" * 400 + b"}"
    )
    resp = httpx.post(gateway.url + "/v1/chat/completions", content=raw)
    assert resp.status_code == 400, resp.text[:300]
    err = resp.json()["error"]
    assert err["param"] == "min_tokens" and err["type"] == "invalid_request_error"
    assert len(err["message"]) < 300
    assert resp.headers["x-saber-outcome"] == "invalid_request"
    after = counts(gateway)
    assert after["total"] == before["total"] + 1
    assert after["in_flight"] == 0 and after["queued"] == 0
    assert idle(gateway, sim)
    for stream in (False, True):
        chat(gateway, sim, stream)
    assert httpx.get(gateway.url + "/health").status_code == 200
    assert idle(gateway, sim)
