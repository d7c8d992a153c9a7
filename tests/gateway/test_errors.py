"""Bad requests get a 4xx with an OpenAI-style body, never a 500; the backend's own
4xx passes through; every refusal is a named outcome with its metric label."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from gateway_support import LONG_TOKENS, UNCAPPED, GatewayFactory

from harness import metric_value
from saber import wire
from saber.gateway import RunningGateway
from saber.sim.http import RunningSim


def assert_openai_error(resp: httpx.Response, status: int, param: str | None = None) -> dict:
    assert resp.status_code == status, resp.text[:300]
    assert resp.headers["content-type"].startswith("application/json")
    assert wire.is_openai_error(resp.json()), resp.text[:300]
    err = resp.json()["error"]
    if param is not None:
        assert err["param"] == param
    return err


@pytest.fixture
def small(gateway_factory: GatewayFactory, sim: RunningSim) -> RunningGateway:
    return gateway_factory(sim.url, max_body_bytes=2048)


@pytest.mark.parametrize(
    ("path", "content", "headers", "status", "param"),
    [
        ("/v1/chat/completions", b"{oops", {}, 400, None),
        ("/v1/chat/completions", b'{"model": "m"}', {}, 400, "messages"),
        ("/v1/completions", b'{"model": "m"}', {}, 400, "prompt"),
        ("/v1/completions", b'{"prompt": "x", "max_tokens": -4}', {}, 400, "max_tokens"),
        ("/v1/completions", b'{"prompt": "x"}', {"x-saber-task": "haiku"}, 400, "X-Saber-Task"),
        ("/v1/completions", b'{"prompt": "' + b"x" * 4096 + b'"}', {}, 413, None),
    ],
    ids=[
        "invalid-json",
        "no-messages",
        "no-prompt",
        "negative-max-tokens",
        "unknown-task",
        "too-big",
    ],
)
def test_bad_requests(
    small: RunningGateway, path: str, content: bytes, headers: dict, status: int, param: str | None
) -> None:
    resp = httpx.post(small.url + path, content=content, headers=headers)
    assert_openai_error(resp, status, param)
    assert resp.headers["x-saber-outcome"] == "invalid_request"
    text = httpx.get(small.url + "/metrics").text
    assert metric_value(text, "saber_requests_total", outcome="invalid_request") == 1
    assert metric_value(text, "saber_requests_total", outcome="internal_error") == 0


def test_oversized_body_without_content_length(small: RunningGateway) -> None:
    def chunks():  # type: ignore[no-untyped-def]
        yield b'{"prompt": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    resp = httpx.post(small.url + "/v1/completions", content=chunks())
    assert_openai_error(resp, 413)


def test_sdk_sees_bad_request_errors(gateway: RunningGateway, sim: RunningSim) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=sim.model, prompt="x", max_tokens=-1)
    assert "max_tokens" in str(info.value)


def test_backend_4xx_passes_through(gateway: RunningGateway) -> None:
    resp = httpx.post(
        gateway.url + "/v1/completions",
        json={"model": "no-such-model", "prompt": "x", "max_tokens": 3},
    )
    err = assert_openai_error(resp, 404)
    assert "no-such-model" in err["message"]
    assert resp.headers["x-saber-outcome"] == "backend_rejected"
    text = httpx.get(gateway.url + "/metrics").text
    assert metric_value(text, "saber_requests_total", outcome="backend_rejected") == 1
    assert metric_value(text, "saber_backend_errors_total", kind="status_4xx") == 1
    assert metric_value(text, "saber_requests_in_flight") == 0


def test_unknown_route_and_method(gateway: RunningGateway) -> None:
    assert_openai_error(httpx.get(gateway.url + "/v1/nothing"), 404)
    assert_openai_error(httpx.get(gateway.url + "/v1/completions"), 405)


def test_api_keys(gateway_factory: GatewayFactory, sim: RunningSim) -> None:
    gw = gateway_factory(sim.url, api_keys=["sk-one", "sk-two"])
    body = {"model": sim.model, "prompt": "x", "max_tokens": 2}
    resp = httpx.post(gw.url + "/v1/completions", json=body)
    assert_openai_error(resp, 401)
    resp = httpx.post(
        gw.url + "/v1/completions", json=body, headers={"authorization": "Bearer sk-zzz"}
    )
    assert_openai_error(resp, 401)
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-two", max_retries=0)
    assert client.completions.create(**body).choices[0].text  # type: ignore[arg-type]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=gw.url + "/v1", api_key="bad", max_retries=0).models.list()


def test_queue_full_is_429_with_retry_after(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(
        sim.url, max_concurrency=1, queue_cap=1, queued_comment_interval_s=0.05, **UNCAPPED
    )
    url = gw.url + "/v1/chat/completions"
    long = {"model": sim.model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 20000}
    long |= {"ignore_eos": True, "stream": True}
    with httpx.Client(timeout=30) as a, a.stream("POST", url, json=long) as first:
        # ignore_eos: 20,000 tokens, which the gateway knows it cannot make in time, so
        # the idle engine serves it demoted.
        assert first.headers["x-saber-outcome"] == "admitted_demoted"
        with httpx.Client(timeout=30) as b, b.stream("POST", url, json=long) as second:
            assert second.headers["x-saber-outcome"] == "queued"
            resp = httpx.post(url, json={**long, "stream": False})
            err = assert_openai_error(resp, 429)
            assert err["code"] == "rejected_queue_full"
            assert resp.headers["x-saber-outcome"] == "rejected_queue_full"
            # When the running one is likely done, from its own pace: whole seconds, and
            # milliseconds (which the OpenAI SDKs and the AI SDK read first).
            seconds, ms = int(resp.headers["retry-after"]), int(resp.headers["retry-after-ms"])
            assert 1 <= seconds <= 59 and seconds == -(-ms // 1000)
            assert f"retry in about {ms / 1000:.1f} s" in err["message"]
    text = httpx.get(gw.url + "/metrics").text
    assert metric_value(text, "saber_requests_total", outcome="rejected_queue_full") == 1


def test_a_request_no_longer_useful_is_503_with_retry_after(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    # code_qna: 43 tokens in 1 s; f(1) = 600 tok/s, so it is hopeless after ~0.93 s
    # in the queue; useful for 1.2 s, it is turned away ~0.2 s later.
    gw = gateway_factory(sim.url, max_concurrency=1, **{"tasks.code_qna.useful_s": 1.2}, **UNCAPPED)
    url = gw.url + "/v1/chat/completions"
    messages = [{"role": "user", "content": "x"}]
    long = {"model": sim.model, "messages": messages, "max_tokens": LONG_TOKENS}
    with (
        httpx.Client(timeout=30) as a,
        a.stream("POST", url, json={**long, "ignore_eos": True, "stream": True}),
    ):
        resp = httpx.post(
            url, json={**long, "max_tokens": 43}, headers={"x-saber-task": "code_qna"}, timeout=5
        )
    err = assert_openai_error(resp, 503)
    assert err["code"] == "rejected_expired"
    assert int(resp.headers["retry-after"]) >= 1
    queue_ms = float(resp.headers["x-saber-queue-ms"])
    assert 1000 <= queue_ms < 2500
    text = httpx.get(gw.url + "/metrics").text
    assert metric_value(text, "saber_demotions_total", task="code_qna") == 1
    assert metric_value(text, "saber_requests_total", outcome="rejected_expired") == 1


def test_error_body_is_json_even_for_streams_after_queueing(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    """A stream committed while queued gets its rejection as an SSE error event."""
    gw = gateway_factory(
        sim.url,
        max_concurrency=1,
        queued_comment_interval_s=0.1,
        **{"tasks.code_qna.useful_s": 1.1},
        **UNCAPPED,
    )
    url = gw.url + "/v1/chat/completions"
    messages = [{"role": "user", "content": "x"}]
    long = {"model": sim.model, "messages": messages, "max_tokens": LONG_TOKENS}
    with (
        httpx.Client(timeout=30) as a,
        a.stream("POST", url, json={**long, "ignore_eos": True, "stream": True}),
    ):
        short = {**long, "max_tokens": 43, "stream": True}
        with httpx.stream(
            "POST", url, json=short, headers={"x-saber-task": "code_qna"}, timeout=5
        ) as r:
            assert r.status_code == 200 and r.headers["x-saber-outcome"] == "queued"
            lines = [line for line in r.iter_lines() if line]
    assert lines[0] == ": queued"
    assert lines[-1] == "data: [DONE]"
    # The whole answer's shape, mid-stream too (issue 48): OpenAI's type, the outcome.
    event = json.loads(lines[-2].removeprefix("data: "))
    assert set(event) == {"error"} and wire.is_openai_error(event)
    error = event["error"]
    assert (error["code"], error["type"], error["param"]) == (
        "rejected_expired",
        "server_error",
        None,
    )
    assert "retry in about" in error["message"]


def test_backend_4xx_after_a_stream_was_committed(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    """Headers are gone already: the backend's error becomes the stream's last event."""
    gw = gateway_factory(sim.url, max_concurrency=1, queued_comment_interval_s=0.05, **UNCAPPED)
    url = gw.url + "/v1/completions"
    long = {"model": sim.model, "prompt": "x", "max_tokens": 3000, "ignore_eos": True}
    with httpx.Client(timeout=30) as a, a.stream("POST", url, json={**long, "stream": True}) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        bad = {"model": "no-such-model", "prompt": "x", "stream": True}
        with httpx.stream("POST", url, json=bad, timeout=10) as q:
            assert q.headers["x-saber-outcome"] == "queued"
            seen = [line for line in q.iter_lines() if line]
        list(lines)
    assert seen[0] == ": queued"
    assert seen[-1] == "data: [DONE]"
    event = json.loads(seen[-2].removeprefix("data: "))
    assert wire.is_openai_error(event) and "no-such-model" in event["error"]["message"]
    assert (event["error"]["type"], event["error"]["code"]) == (
        "not_found_error",
        "backend_rejected",
    )
    text = httpx.get(gw.url + "/metrics").text
    assert metric_value(text, "saber_requests_total", outcome="backend_rejected") == 1


def test_an_unknown_task_in_the_model_name_names_it(
    gateway: RunningGateway, sim: RunningSim
) -> None:
    """Issue 48: ``model: qwen-coder:foo`` got the backend's "The model does not exist"
    although the model exists; now the 400 names the task and lists the known ones."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=f"{sim.model}:foo", messages=[{"role": "user", "content": "x"}]
        )
    message = info.value.message
    assert "unknown task type 'foo'" in message and "code_generation, code_qna" in message
    assert isinstance(info.value.body, dict) and info.value.body["code"] == "unknown_task"
    assert info.value.body["param"] == "model"
    # A model the backend does not serve is still the backend's answer (404).
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="other:foo", messages=[{"role": "user", "content": "x"}]
        )


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_without_a_model_is_served_by_the_served_one_and_says_so(
    gateway: RunningGateway, sim: RunningSim, stream: bool
) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": stream}
    resp = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30)
    assert resp.status_code == 200 and resp.headers["x-saber-default-model"] == sim.model
    assert f'"model":"{sim.model}"' in resp.text.replace(" ", "")
    named = httpx.post(
        gateway.url + "/v1/chat/completions", json={**body, "model": sim.model}, timeout=30
    )
    assert named.status_code == 200 and "x-saber-default-model" not in named.headers


def test_the_backends_errors_come_back_in_openai_shape_with_their_message(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    """Issue 48: errors passed through kept the backend's shape (saber-sim's FastAPI
    ``{"detail": "Not Found"}``, vLLM's integer code), so the SDK showed only the status."""
    gw = gateway_factory(sim.url, **UNCAPPED)
    chat = {"model": sim.model, "messages": [{"role": "user", "content": "x"}]}
    too_long = httpx.post(gw.url + "/v1/chat/completions", json={**chat, "max_tokens": 10**6})
    err = assert_openai_error(too_long, 400, param="max_tokens")
    assert err["code"] == "backend_rejected" and "maximum context length" in err["message"]
    assert too_long.headers["x-saber-outcome"] == "backend_rejected"
    unknown = httpx.post(gw.url + "/v1/chat/completions", json={**chat, "model": "nope"})
    err = assert_openai_error(unknown, 404, param="model")
    assert err["type"] == "not_found_error" and "nope" in err["message"]
    # A route saber-sim does not serve: FastAPI's own 404, relayed in OpenAI's shape.
    missing = httpx.post(gw.url + "/tokenize", json={"model": sim.model, "prompt": "x"})
    err = assert_openai_error(missing, 404)
    assert err["message"] == "Not Found" and err["code"] == "backend_rejected"
    with pytest.raises(openai.NotFoundError) as info:
        openai.OpenAI(base_url=gw.url, api_key="x", max_retries=0).post(
            "/tokenize", body={"prompt": "x"}, cast_to=object
        )
    assert "Not Found" in str(info.value)
