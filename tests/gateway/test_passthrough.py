"""The backend's other routes through the gateway: the same answers as the backend gives
directly, at most passthrough.max_concurrency at the backend at once, counted; the
routes that generate outside the scheduler refused with a reason; model cards."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import httpx
import openai
import pytest
from gateway_support import GatewayFactory
from vllm_stub import MAX_MODEL_LEN, MODEL, Stub

from harness import metric_value, serve_app
from saber import wire
from saber.gateway.routes.passthrough import RELAYED
from saber.sim.http import RunningSim

BODIES: dict[str, dict[str, object]] = {
    "/v1/embeddings": {"model": MODEL, "input": ["def add(a, b):", "return a + b"]},
    "/tokenize": {"model": MODEL, "prompt": "def add(a, b): return a + b"},
    "/detokenize": {"model": MODEL, "tokens": [3, 1, 4]},
    "/pooling": {"model": MODEL, "input": "x"},
    "/classify": {"model": MODEL, "input": "x"},
    "/score": {"model": MODEL, "text_1": "q", "text_2": ["a", "b"]},
    "/v1/score": {"model": MODEL, "text_1": "q", "text_2": ["a", "b"]},
    "/rerank": {"model": MODEL, "query": "q", "documents": ["a", "b", "c"]},
    "/v1/rerank": {"model": MODEL, "query": "q", "documents": ["a", "b", "c"]},
    "/v2/rerank": {"model": MODEL, "query": "q", "documents": ["a", "b", "c"]},
}


@pytest.fixture
def stub() -> Iterator[tuple[Stub, str]]:
    s = Stub()
    with serve_app(s.app) as url:
        yield s, url


def _call(base: str, path: str, **kw: object) -> httpx.Response:
    if RELAYED[path] == "GET":
        return httpx.get(base + path, timeout=10, **kw)  # type: ignore[arg-type]
    return httpx.post(base + path, json=BODIES[path], timeout=10, **kw)  # type: ignore[arg-type]


def test_every_route_answers_as_the_backend_does(
    gateway_factory: GatewayFactory, stub: tuple[Stub, str]
) -> None:
    _, url = stub
    gw = gateway_factory(url)
    assert set(RELAYED) == {*BODIES, "/version"}
    for path in RELAYED:
        direct, through = _call(url, path), _call(gw.url, path)
        assert (through.status_code, through.json()) == (direct.status_code, direct.json()), path
        assert through.headers["content-type"] == direct.headers["content-type"]
    # Its errors too: the status and the message, in OpenAI's shape (issue 48).
    bad = {**BODIES["/v1/embeddings"], "model": "nope"}
    direct = httpx.post(url + "/v1/embeddings", json=bad)
    through = httpx.post(gw.url + "/v1/embeddings", json=bad)
    assert through.status_code == direct.status_code == 404
    assert wire.is_openai_error(through.json())
    assert through.json()["error"]["message"] == wire.error_message(direct.content)
    assert through.json()["error"]["type"] == "not_found_error"
    text = httpx.get(gw.url + "/metrics").text
    for path in BODIES:
        assert metric_value(text, "saber_passthrough_requests_total", route=path, status="200") == 1
    assert (
        metric_value(text, "saber_passthrough_requests_total", route="/v1/embeddings", status="404")
        == 1
    )
    assert metric_value(text, "saber_passthrough_in_flight") == 0


def test_the_official_client_embeds_through_the_gateway(
    gateway_factory: GatewayFactory, stub: tuple[Stub, str]
) -> None:
    _, url = stub
    gw = gateway_factory(url)
    texts = ["def add(a, b):", "class Stack:"]
    direct = openai.OpenAI(base_url=url + "/v1", api_key="x").embeddings.create(
        model=MODEL, input=texts, encoding_format="float"
    )
    through = openai.OpenAI(base_url=gw.url + "/v1", api_key="x").embeddings.create(
        model=MODEL, input=texts, encoding_format="float"
    )
    assert [d.embedding for d in through.data] == [d.embedding for d in direct.data]


def test_an_alias_names_the_real_model_and_keys_are_the_backends(
    gateway_factory: GatewayFactory, stub: tuple[Stub, str]
) -> None:
    s, url = stub
    gw = gateway_factory(url, api_keys=["sk-client"], **{"backend.api_key": "sk-backend"})
    body = {"model": "autocomplete", "prompt": "def f():"}
    r = httpx.post(gw.url + "/tokenize", json=body)
    assert r.status_code == 401  # the client's key is checked here too
    r = httpx.post(gw.url + "/tokenize", json=body, headers={"authorization": "Bearer sk-client"})
    assert r.status_code == 200, r.text
    path, seen, headers = s.seen[-1]
    assert (path, seen["model"]) == ("/tokenize", MODEL)
    assert headers["authorization"] == "Bearer sk-backend"


def test_at_most_max_concurrency_at_the_backend(
    gateway_factory: GatewayFactory,
) -> None:
    s = Stub(delay_s=0.3)
    with serve_app(s.app) as url:
        gw = gateway_factory(url, **{"passthrough.max_concurrency": 2})
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            codes = list(pool.map(lambda _: _call(gw.url, "/v1/embeddings").status_code, range(6)))
        assert codes == [200] * 6
        assert s.most_in_flight == 2
        text = httpx.get(gw.url + "/metrics").text
    assert (
        metric_value(text, "saber_passthrough_requests_total", route="/v1/embeddings", status="200")
        == 6
    )
    assert (
        metric_value(text, "saber_passthrough_duration_seconds_count", route="/v1/embeddings") == 6
    )
    assert metric_value(text, "saber_passthrough_waiting") == 0


def test_past_the_queue_cap_a_429(gateway_factory: GatewayFactory) -> None:
    s = Stub(delay_s=0.5)
    with serve_app(s.app) as url:
        gw = gateway_factory(url, **{"passthrough.max_concurrency": 1, "passthrough.queue_cap": 1})
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(lambda _: _call(gw.url, "/tokenize"), range(3)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [200, 200, 429]
    refused = next(a for a in answers if a.status_code == 429)
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "passthrough_queue_full"


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/resp_1"])
def test_responses_are_refused_with_the_reason(
    gateway_factory: GatewayFactory, stub: tuple[Stub, str], path: str
) -> None:
    _, url = stub
    gw = gateway_factory(url)
    r = httpx.post(gw.url + path, json={"model": MODEL, "input": "hi"})
    assert r.status_code == 501
    assert r.headers["x-should-retry"] == "false"
    message = r.json()["error"]["message"]
    assert "/v1/chat/completions" in message and "generates" in message
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x")  # its 2 retries: not used
    with pytest.raises(openai.InternalServerError, match="does not relay"):
        client.responses.create(model=MODEL, input="hi")


def test_model_cards(gateway_factory: GatewayFactory, stub: tuple[Stub, str]) -> None:
    _, url = stub
    gw = gateway_factory(url)
    listed = {m["id"]: m for m in httpx.get(gw.url + "/v1/models").json()["data"]}
    # An alias's card is its real model's: its context length included.
    assert listed["autocomplete"]["max_model_len"] == MAX_MODEL_LEN
    assert listed[f"{MODEL}:code_qna"]["max_model_len"] == MAX_MODEL_LEN
    assert listed["chat"]["root"] == MODEL and listed["chat"]["created"] == 1700000000
    for name in (MODEL, "chat", f"{MODEL}:code_translation"):
        card = httpx.get(f"{gw.url}/v1/models/{name}")
        assert card.status_code == 200 and card.json() == listed[name]
    missing = httpx.get(gw.url + "/v1/models/org/none")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "The model 'org/none' does not exist."
    model = openai.OpenAI(base_url=gw.url + "/v1", api_key="x").models.retrieve("generate")
    assert (model.id, model.owned_by) == ("generate", "saber-gateway")


def test_saber_sims_version_as_it_is(gateway_factory: GatewayFactory, sim: RunningSim) -> None:
    gw = gateway_factory(sim.url)
    direct, through = httpx.get(sim.url + "/version"), httpx.get(gw.url + "/version")
    assert (through.status_code, through.json()) == (direct.status_code, direct.json())
    # What saber-sim does not serve, the gateway does not invent: its 404.
    r = httpx.post(gw.url + "/tokenize", json={"model": sim.model, "prompt": "x"})
    assert r.status_code == httpx.post(sim.url + "/tokenize", json={}).status_code == 404


def test_a_backend_away_is_a_503(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory("http://127.0.0.1:9")
    r = httpx.post(gw.url + "/v1/embeddings", json=BODIES["/v1/embeddings"])
    assert r.status_code == 503 and r.json()["error"]["code"] == "backend_unavailable"
    text = httpx.get(gw.url + "/metrics").text
    assert (
        metric_value(text, "saber_passthrough_requests_total", route="/v1/embeddings", status="503")
        == 1
    )
