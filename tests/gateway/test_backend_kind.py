"""In front of llama.cpp: detected, its load exported, and its differences from
vLLM handled (usage, min_tokens, n_predict, errors, loading)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fake_llamacpp import BUILD_INFO, ERROR_STREAM, MODEL, USAGE, FakeLlamaCpp, error
from gateway_support import GatewayFactory, offered
from prometheus_client.parser import text_string_to_metric_families

from harness import metric_value, wait_for
from saber import wire
from saber.gateway import RunningGateway

FAST_SCRAPES = {"backend.metrics_interval_s": 0.1}


def start(factory: GatewayFactory, fake: FakeLlamaCpp, **overrides: Any) -> RunningGateway:
    return factory(
        "http://llama.invalid", transport=fake.transport(), **{**FAST_SCRAPES, **overrides}
    )


def metrics(gw: RunningGateway) -> str:
    return httpx.get(gw.url + "/metrics").text


def offered_tokens(gw: RunningGateway) -> list[int]:
    return [r.tokens for r in offered(gw)]


def mirrored(gw: RunningGateway, what: str) -> float:
    return metric_value(metrics(gw), f"saber_backend_requests_{what}")


def test_detected_and_its_load_exported(gateway_factory: GatewayFactory) -> None:
    fake = FakeLlamaCpp(processing=2, deferred=1)
    gw = start(gateway_factory, fake)
    backend = httpx.get(gw.url + "/saber/status").json()["backend"]
    assert backend["kind"] == "llamacpp" and backend["kind_source"] == "detected"
    assert backend["version"] == BUILD_INFO and backend["models"] == [MODEL]
    wait_for(lambda: mirrored(gw, "running"), lambda n: n == 2, describe="running 2 mirrored")
    fake.processing, fake.deferred = 9, 4
    wait_for(lambda: mirrored(gw, "waiting"), lambda n: n == 4, describe="waiting 4 mirrored")
    text = metrics(gw)
    assert metric_value(text, "saber_backend_requests_running") == 9
    assert metric_value(text, "saber_requests_in_flight") == 0
    info = [
        s.labels
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "saber_backend_info"
    ]
    assert info == [{"kind": "llamacpp", "version": BUILD_INFO, "source": "detected"}]
    assert metric_value(text, "saber_backend_scrape_errors_total") == 0


def test_completion_usage_stays_where_llamacpp_puts_it(gateway_factory: GatewayFactory) -> None:
    fake = FakeLlamaCpp()
    gw = start(gateway_factory, fake)
    body = {"model": MODEL, "prompt": "x", "stream": True, "max_tokens": 7}
    with httpx.stream("POST", gw.url + "/v1/completions", json=body) as r:
        events = [line for line in r.iter_lines() if line]
    assert fake.posts[0]["stream_options"] == {"include_usage": True}
    assert len(events) == 3 and events[-1] == "data: [DONE]"
    last = json.loads(events[1].removeprefix("data: "))
    assert last["usage"] == USAGE  # llama.cpp sends it asked or not: the client keeps it
    assert metric_value(metrics(gw), "saber_generated_tokens_total") == 7


def test_min_tokens_ignored_and_n_predict_read(gateway_factory: GatewayFactory) -> None:
    fake = FakeLlamaCpp(reply=(200, {"choices": [{"text": "ab"}], "usage": USAGE}))
    gw = start(gateway_factory, fake, trace=True)
    qna = {"x-saber-task": "code_qna"}  # expects 43 tokens
    for extra in ({"max_tokens": 400, "min_tokens": 300}, {"max_tokens": 10, "n_predict": -1}):
        body = {"model": MODEL, "prompt": "x", **extra}
        resp = httpx.post(gw.url + "/v1/completions", json=body, headers=qna)
        assert resp.status_code == 200, resp.text
    # llama.cpp ignores min_tokens; its n_predict wins over max_tokens (-1: no cap).
    assert offered_tokens(gw) == [43, 43]
    # No cap (-1) on a task type the client named: clamped to code_qna's max_tokens.
    assert fake.posts[1]["n_predict"] == 256 and fake.posts[1]["max_tokens"] == 10


def test_an_error_event_is_followed_by_done(gateway_factory: GatewayFactory) -> None:
    fake = FakeLlamaCpp(stream=ERROR_STREAM)
    gw = start(gateway_factory, fake)
    body = {"model": MODEL, "prompt": "x", "stream": True}
    with httpx.stream("POST", gw.url + "/v1/completions", json=body) as r:
        events = [line for line in r.iter_lines() if line]
    assert len(events) == 3 and events[-1] == "data: [DONE]"
    event = json.loads(events[1].removeprefix("data: "))
    assert event["error"]["message"] == "decode failed" and wire.is_openai_error(event)
    text = metrics(gw)
    assert metric_value(text, "saber_requests_total", outcome="backend_error") == 1
    assert metric_value(text, "saber_backend_errors_total", kind="stream_error") == 1
    assert gw.gateway.scheduler.load == 0


def test_loading_is_503_with_retry_after(gateway_factory: GatewayFactory) -> None:
    fake = FakeLlamaCpp()
    gw = start(gateway_factory, fake)
    fake.loading = True
    resp = httpx.post(gw.url + "/v1/completions", json={"model": MODEL, "prompt": "x"})
    assert resp.status_code == 503 and resp.headers["retry-after"] == "1"
    assert resp.headers["x-saber-outcome"] == "backend_unavailable"
    err = resp.json()["error"]
    assert err["code"] == "backend_unavailable" and "Loading model" in err["message"]
    health = httpx.get(gw.url + "/health")
    assert health.status_code == 503 and health.json()["status"] == "backend_unhealthy"
    assert gw.gateway.scheduler.load == 0
    fake.loading = False
    assert httpx.get(gw.url + "/health").status_code == 200


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            400,
            error(
                400, "the request exceeds the available context size", "exceed_context_size_error"
            ),
        ),
        (401, error(401, "Invalid API Key", "authentication_error")),
    ],
)
def test_its_client_errors_pass_through_with_their_message(
    gateway_factory: GatewayFactory, status: int, body: dict[str, Any]
) -> None:
    """llama.cpp's error (an integer code, its own type names) comes back with its status
    and message, in OpenAI's shape (issue 48)."""
    fake = FakeLlamaCpp(reply=(status, body))
    gw = start(gateway_factory, fake)
    resp = httpx.post(gw.url + "/v1/completions", json={"model": MODEL, "prompt": "x"})
    assert resp.status_code == status and wire.is_openai_error(resp.json())
    err = resp.json()["error"]
    assert err["message"] == body["error"]["message"] and err["code"] == "backend_rejected"
    assert err["type"] == wire.error_type(status)
    assert resp.headers["x-saber-outcome"] == "backend_rejected"


def test_a_configured_kind_is_not_detected(gateway_factory: GatewayFactory) -> None:
    fake = FakeLlamaCpp()
    gw = start(gateway_factory, fake, **{"backend.kind": "sim"})
    backend = httpx.get(gw.url + "/saber/status").json()["backend"]
    assert backend["kind"] == "sim" and backend["kind_source"] == "configured"
    assert backend["version"] is None and backend["models"] == [MODEL]
    # sim reads vLLM's series, which llama.cpp does not have: each read fails, counted.
    wait_for(
        lambda: metric_value(metrics(gw), "saber_backend_scrape_errors_total"),
        lambda n: n >= 2,
        describe="2 failed reads",
    )
    status = httpx.get(gw.url + "/saber/status").json()["backend"]
    assert "vllm:num_requests_running" in status["last_scrape_error"]
    assert status["running"] is None and status["scraped_age_s"] is None
    assert "saber_backend_requests_running" not in metrics(gw)
