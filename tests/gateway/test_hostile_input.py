"""Hostile bodies at the edge: every number that reaches the scheduler or the backend is
bounded, and JSON that Python chokes on is a 400, never a 500; each is counted and
logged as a request, and nothing reaches the scheduler or the backend."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from fake_vllm import MODEL, FakeVllm
from gateway_support import GatewayFactory, requests_total, start_fake

from saber import wire
from saber.gateway import RunningGateway
from saber.gateway.edge.payload import parse
from saber.gateway.errors import GatewayError
from saber.gateway.observe.logs import REQUEST_LOGGER

DEPTH = 128  # saber.gateway.edge.payload.MAX_DEPTH (named here so that the test runs on main)

CHAT = b'"model": "%s", "messages": [{"role": "user", "content": "hi"}]' % MODEL.encode()
PROMPT = b'"model": "%s", "prompt": "def f():"' % MODEL.encode()


@pytest.fixture
def fake() -> FakeVllm:
    return FakeVllm()


@pytest.fixture
def gw(gateway_factory: GatewayFactory, fake: FakeVllm) -> RunningGateway:
    return start_fake(gateway_factory, fake, trace=True, log_requests=True)


def offers(gw: RunningGateway) -> int:
    return sum(1 for e in gw.gateway.admission.trace or [] if e.call == "offer")


BAD_NUMBERS = [
    # (endpoint, the field's JSON text, the field the 400 names)
    ("chat", b'"min_tokens": 1' + b"0" * 400, "min_tokens"),
    ("chat", b'"max_tokens": 1099511627776', "max_tokens"),
    ("chat", b'"max_completion_tokens": 1e400', "max_completion_tokens"),
    ("chat", b'"n": 1000000000000000000000000000000', "n"),
    ("chat", b'"n": 0', "n"),
    ("completions", b'"best_of": 1e400', "best_of"),
    ("completions", b'"logprobs": 1000000000', "logprobs"),
    ("chat", b'"logprobs": 5', "logprobs"),
    ("chat", b'"top_logprobs": 99', "top_logprobs"),
    ("chat", b'"temperature": 1e400', "temperature"),
    ("chat", b'"temperature": NaN', "temperature"),
    ("chat", b'"top_p": -Infinity', "top_p"),
    ("chat", b'"presence_penalty": 3', "presence_penalty"),
    ("chat", b'"frequency_penalty": true', "frequency_penalty"),
    ("chat", b'"seed": 18446744073709551616', "seed"),
    ("chat", b'"top_k": 100000000000000000000', "top_k"),
    ("chat", b'"logit_bias": {"42": 1e400}', "logit_bias"),
    ("chat", b'"logit_bias": {"a": 1}', "logit_bias"),
    ("completions", b'"truncate_prompt_tokens": -5', "truncate_prompt_tokens"),
    ("chat", b'"x_vendor": {"deep": [1, 2, -1e999]}', "x_vendor"),
]


@pytest.mark.parametrize(("endpoint", "field", "param"), BAD_NUMBERS)
def test_every_number_is_bounded_at_the_edge(
    gw: RunningGateway, fake: FakeVllm, endpoint: str, field: bytes, param: str
) -> None:
    """Defect 1 (issue 14): a number no engine serves reached the scheduler (min_tokens,
    fixed in issue 12) or went to the backend as it came (n, best_of, logprobs,
    temperature as inf, which the gateway's own rewrite then sent as ``Infinity``).
    Each is now a 400 naming the field, counted, with nothing offered or relayed."""
    base = CHAT if endpoint == "chat" else PROMPT
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    body = b"{" + base + b', "stream": true, ' + field + b"}"
    resp = httpx.post(gw.url + path, content=body)
    assert resp.status_code == 400, resp.text[:300]
    assert wire.is_openai_error(resp.json()), resp.text[:300]
    err = resp.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", err
    assert len(err["message"]) < 300
    assert resp.headers["x-saber-outcome"] == "invalid_request"
    assert fake.posts == [] and offers(gw) == 0
    assert requests_total(gw) == requests_total(gw, "invalid_request") == 1
    s = gw.gateway.scheduler
    assert s.load == 0 and s.queued() == 0 and gw.gateway.admission.active == 0


def test_numbers_within_bounds_pass_untouched(gw: RunningGateway, fake: FakeVllm) -> None:
    fields = {
        "n": 2, "best_of": 2, "logprobs": True, "top_logprobs": 20, "temperature": 0.0,
        "top_p": 1, "seed": -(2**63), "top_k": -1, "min_tokens": 3, "max_tokens": 5,
        "logit_bias": {"42": -100}, "x_vendor": 1e308,
    }  # fmt: skip
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields}
    resp = httpx.post(gw.url + "/v1/chat/completions", json=body)
    assert resp.status_code == 200, resp.text
    assert fake.posts[0][0] == body  # not rewritten: the client's bytes went upstream


def test_deep_nesting_and_lone_surrogates_are_400_counted_and_logged(
    gw: RunningGateway, fake: FakeVllm, caplog: pytest.LogCaptureFixture
) -> None:
    """Defect 2 (issue 14): JSON nested 10,000 deep raised RecursionError, and a lone
    surrogate in a streamed message (which the gateway re-encodes to ask for usage)
    raised UnicodeEncodeError: both were 500s. Now both are 400s, counted as
    invalid_request and logged as requests."""
    deep = b'{"prompt": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    just_too_deep = b'{"prompt": "x", "x": ' + b"[" * DEPTH + b"]" * DEPTH + b"}"
    surrogate = b"{" + CHAT.replace(b"hi", b"a\\ud800b") + b', "stream": true}'
    key = b'{"prompt": "x", "\\udfff": 1}'
    cases = [
        ("/v1/completions", deep, None),
        ("/v1/completions", just_too_deep, None),
        ("/v1/chat/completions", surrogate, "messages"),
        ("/v1/completions", key, None),
    ]
    with caplog.at_level(logging.INFO, logger=REQUEST_LOGGER):
        for path, body, param in cases:
            resp = httpx.post(gw.url + path, content=body)
            assert resp.status_code == 400, resp.text[:300]
            assert wire.is_openai_error(resp.json()), resp.text[:300]
            err = resp.json()["error"]
            assert err["param"] == param and err["type"] == "invalid_request_error"
    assert requests_total(gw, "invalid_request") == len(cases)
    assert requests_total(gw, "internal_error") == 0
    lines = [r for r in caplog.records if r.name == REQUEST_LOGGER]
    assert [r.__dict__["outcome"] for r in lines] == ["invalid_request"] * len(cases)
    assert fake.posts == [] and offers(gw) == 0
    # A surrogate pair is text: it passes, and goes upstream as the client sent it.
    pair = b"{" + CHAT.replace(b"hi", b"\\ud83d\\ude00") + b', "stream": true}'
    resp = httpx.post(gw.url + "/v1/chat/completions", content=pair)
    assert resp.status_code == 200
    assert fake.posts[0][0]["messages"][0]["content"] == "\U0001f600"


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe{}",  # not UTF-8
        '{"prompt": "x"}'.encode("utf-16"),
        b'{"prompt": 1' + b"0" * 5000 + b"}",  # past Python's int digits limit
        b'{"prompt": "x", "max_tokens": 10' + b"0" * 5000 + b"}",
    ],
)
def test_undecodable_bodies_are_400(raw: bytes) -> None:
    with pytest.raises(GatewayError) as info:
        parse("completions", raw)
    assert info.value.status == 400 and wire.is_openai_error(info.value.body())


def test_a_deep_body_within_the_limit_passes() -> None:
    from saber.gateway.edge.payload import MAX_DEPTH

    assert MAX_DEPTH == DEPTH
    within = b'{"prompt": "x", "x": ' + b"[" * (DEPTH - 1) + b"]" * (DEPTH - 1) + b"}"
    assert parse("completions", within).body["x"]
    nested = json.dumps({"prompt": "x", "tools": [{"a": [[[[[[[[[[1]]]]]]]]]]}]})
    assert parse("completions", nested.encode()).body["tools"][0]["a"][0]


def test_the_pass_through_routes_take_hostile_bodies_too(gw: RunningGateway) -> None:
    """An alias is rewritten in their bodies: JSON Python chokes on is not a 500 there."""
    deep = b'{"model": "chat", "prompt": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    surrogate = b'{"model": "chat", "prompt": "a\\ud800b"}'
    for body in (deep, surrogate):
        resp = httpx.post(gw.url + "/tokenize", content=body)
        assert resp.status_code < 500, resp.text[:200]
        if resp.status_code >= 400:  # the gateway's own error, or the backend's: one shape
            assert wire.is_openai_error(resp.json()), resp.text[:300]
