"""The gateway in front of genuine vLLM (the CPU build, a tiny random model).

Run with ``.venv/bin/pytest -q -m vllm``. The engine starts once per session (about a
minute); every test goes through a real saber-gateway with the official SDK.
"""

from __future__ import annotations

import concurrent.futures
import threading

import httpx
import openai
import pytest
from real_support import (
    BACKEND_RUNNING,
    IGNORE_EOS,
    IN_FLIGHT,
    MESSAGES,
    MIRROR_S,
    PROMPT,
    StreamReader,
    admission_digest,
    all_done,
    backend_status,
    check_chat,
    check_completions,
    check_errors_in_openai_shape,
    check_ignore_eos_lengths,
    client_for,
    direct_prompt_tokens,
    outcomes,
    settle,
    stream_started,
)

from harness import EngineGateway, scrape
from saber import wire
from saber.backend import BackendKind, BackendLoad, parse_load

pytestmark = pytest.mark.vllm

RUNNING = "vllm:num_requests_running"
# Nearly all of the 16,384 positions the tests' vLLM allows: a minute or so at the few
# hundred tokens/s a stream gets on 2 cores, so that a test finds the request still
# running however slowly the busy machine answers its requests for metrics.
LONG = 16000
# vLLM's own option: one chunk per 16 tokens. Long streams then cost vLLM's API server,
# the gateway and the client a sixteenth of the per-token work, which on 2 cores is what
# starved everything else (metrics unanswered for tens of seconds, connect timeouts).
LONG_BODY = {**IGNORE_EOS, "stream_interval": 16}
OUTCOMES = "saber_requests_total"
GENERATED = "vllm:generation_tokens_total"


def test_chat(vllm_gateway: EngineGateway) -> None:
    reply = check_chat(vllm_gateway)
    assert reply.model == vllm_gateway.engine.model


def test_completions(vllm_gateway: EngineGateway) -> None:
    check_completions(vllm_gateway)


@pytest.mark.parametrize("max_tokens", [1, 9, 64])
def test_ignore_eos_lengths_are_exact(vllm_gateway: EngineGateway, max_tokens: int) -> None:
    check_ignore_eos_lengths(vllm_gateway, max_tokens)


def test_chat_stream_with_usage(vllm_gateway: EngineGateway) -> None:
    engine = vllm_gateway.engine
    client = client_for(vllm_gateway.api_url)
    chunks = list(
        client.chat.completions.create(
            model=engine.model,
            messages=MESSAGES,
            max_tokens=32,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=IGNORE_EOS,
        )
    )
    *body, last = chunks
    # vLLM's shape: a separate last chunk with no choices carries the usage.
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 32
    assert last.usage.prompt_tokens == direct_prompt_tokens(engine, messages=MESSAGES)
    assert all(c.usage is None for c in body)
    assert body[-1].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].delta.content or "" for c in body)


def test_completions_stream_with_usage(vllm_gateway: EngineGateway) -> None:
    client = client_for(vllm_gateway.api_url)
    chunks = list(
        client.completions.create(
            model=vllm_gateway.engine.model,
            prompt=PROMPT,
            max_tokens=40,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=IGNORE_EOS,
        )
    )
    *body, last = chunks
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 40
    assert all(c.usage is None for c in body)
    assert body[-1].choices[0].finish_reason == "length"


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_stream_without_usage_carries_none(vllm_gateway: EngineGateway, endpoint: str) -> None:
    """The gateway asks vLLM for usage anyway (to count tokens); the client must not see it."""
    client = client_for(vllm_gateway.api_url)
    model = vllm_gateway.engine.model
    if endpoint == "chat":
        stream = client.chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=16, stream=True, extra_body=IGNORE_EOS
        )
    else:
        stream = client.completions.create(
            model=model, prompt=PROMPT, max_tokens=16, stream=True, extra_body=IGNORE_EOS
        )
    chunks = list(stream)
    assert chunks
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_unknown_model_is_vllms_404_in_openai_shape(vllm_gateway: EngineGateway) -> None:
    client = client_for(vllm_gateway.api_url)
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=4)
    assert caught.value.status_code == 404 and "no-such-model" in caught.value.message
    body = caught.value.response.json()
    assert (body["error"]["type"], body["error"]["code"]) == ("not_found_error", "backend_rejected")


def test_vllms_errors_come_back_in_openai_shape_with_its_message(
    vllm_gateway: EngineGateway,
) -> None:
    """vLLM writes its own shape (``"type": "BadRequestError"``, the status as an integer
    ``code``); through the gateway each error has OpenAI's, its message and status kept.
    Each request names a ``max_tokens`` within its task's cap, so that the gateway sends
    it as it came and vLLM's message (which quotes the numbers) is the same both ways."""
    model = vllm_gateway.engine.model
    chat = {"model": model, "messages": MESSAGES}
    check_errors_in_openai_shape(
        vllm_gateway,
        [
            ("POST", "/v1/chat/completions", {**chat, "model": "no-such-model"}),
            ("POST", "/v1/chat/completions", {**chat, "max_tokens": 4, "min_tokens": 8}),
            ("POST", "/v1/completions", {"model": model, "prompt": "x " * 20_000, "max_tokens": 4}),
            ("POST", "/v1/embeddings", {"model": model, "input": ["def f():"]}),
            ("POST", "/detokenize", {"model": model, "tokens": [-1]}),
        ],
    )


def test_disconnect_aborts_the_request_upstream(vllm_gateway: EngineGateway) -> None:
    engine = vllm_gateway.engine
    client = client_for(vllm_gateway.api_url)
    settle(engine.base_url, RUNNING, 0, timeout=10.0)
    generated = scrape(engine.base_url, GENERATED)
    cancelled = scrape(vllm_gateway.url, OUTCOMES, outcome="cancelled_running")
    with StreamReader(
        lambda: client.chat.completions.with_streaming_response.create(
            model=engine.model,
            messages=MESSAGES,
            max_tokens=LONG,
            stream=True,
            extra_body=LONG_BODY,
        )
    ) as reader:
        stream_started(reader, 30.0)
        settle(vllm_gateway.url, IN_FLIGHT, 1, timeout=20.0)
        # vLLM refreshes its gauges as its engine steps report, a moment behind.
        settle(engine.base_url, RUNNING, 1, timeout=20.0)
        # The gateway mirrors vLLM's own count (read from its /metrics every second).
        settle(vllm_gateway.url, BACKEND_RUNNING, 1, timeout=MIRROR_S)
    # Closed: the client went away, thousands of tokens early.
    assert reader.error is None and not reader.finished
    settle(engine.base_url, RUNNING, 0, timeout=2.0, why="vLLM kept generating")
    assert scrape(engine.base_url, GENERATED) - generated < LONG, "vLLM ran it to the end"
    settle(vllm_gateway.url, IN_FLIGHT, 0, timeout=2.0)
    assert scrape(vllm_gateway.url, OUTCOMES, outcome="cancelled_running") == cancelled + 1
    settle(vllm_gateway.url, BACKEND_RUNNING, 0, timeout=MIRROR_S)


def _long_chat_stream(gw: EngineGateway, streaming: threading.Event) -> str | None:
    """The finish_reason the client saw (or the SDK's exception)."""
    stream = client_for(gw.api_url).chat.completions.create(
        model=gw.engine.model,
        messages=MESSAGES,
        max_tokens=LONG,
        stream=True,
        extra_body=LONG_BODY,
    )
    finish = None
    for chunk in stream:
        streaming.set()
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    return finish


def _long_completion(gw: EngineGateway, streaming: threading.Event) -> str | None:
    streaming.set()  # nothing to see before the end
    reply = client_for(gw.api_url).completions.create(
        model=gw.engine.model, prompt=PROMPT, max_tokens=LONG, extra_body=LONG_BODY
    )
    return reply.choices[0].finish_reason


# One of each: the two ways a client can learn of the failure. More would only load
# the 2 cores further and blur what the test sees.
LONG_CALLS = [_long_chat_stream, _long_completion]


def _stop_under_load(
    gw: EngineGateway, grace_s: float
) -> list[concurrent.futures.Future[str | None]]:
    """Start LONG_CALLS through the gateway, stop vLLM while all are at it, and return
    their futures, all done: a client still waiting 30 s later fails the test."""
    engine = gw.engine
    pool = concurrent.futures.ThreadPoolExecutor(len(LONG_CALLS))
    try:
        started = [threading.Event() for _ in LONG_CALLS]
        futures = [pool.submit(call, gw, s) for call, s in zip(LONG_CALLS, started, strict=True)]
        # Generous: a busy 2-core machine can take tens of seconds to get four going.
        assert all(s.wait(60.0) for s in started), outcomes(futures)
        settle(
            gw.url,
            IN_FLIGHT,
            len(LONG_CALLS),
            timeout=60.0,
            why=lambda: f"{outcomes(futures)}; {admission_digest(gw)}",
        )
        engine.stop(grace_s=grace_s)
        all_done(futures, 30.0, "a client hung after vLLM went away")
        settle(gw.url, IN_FLIGHT, 0, timeout=2.0)
        return futures
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        if not engine.running:
            engine.restart()


def _serves_again(gw: EngineGateway) -> None:
    """The gateway that was running all along serves the restarted engine."""
    reply = client_for(gw.api_url).chat.completions.create(
        model=gw.engine.model, messages=MESSAGES, max_tokens=8, extra_body=IGNORE_EOS
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 8
    assert httpx.get(gw.url + "/health", timeout=10).status_code == 200


def test_engine_killed_mid_request_then_restarted(vllm_gateway: EngineGateway) -> None:
    """vLLM dies (SIGKILL, all its processes) under a stream and a plain request: both
    clients get an error, nothing hangs, and the same gateway serves once vLLM is back."""
    stream, plain = (f.exception() for f in _stop_under_load(vllm_gateway, grace_s=0))
    # The stream's 200 was already sent: it ends with an error event; the SDK raises it.
    assert isinstance(stream, openai.APIError), stream
    assert not isinstance(stream, openai.APIStatusError), stream
    assert isinstance(plain, openai.APIStatusError), plain
    assert plain.status_code in (502, 503)
    _serves_again(vllm_gateway)


def test_engine_terminated_mid_request_then_restarted(vllm_gateway: EngineGateway) -> None:
    """vLLM shut down in order (SIGTERM): nothing hangs and no client takes a cut-off
    answer for a whole one.

    vLLM 0.32 races with itself here: it either aborts the running requests (200,
    ``finish_reason: "abort"``, the stream closed with ``[DONE]``), or fails them
    (500, an error event), or leaves their connections open until it is killed; each
    must reach the client as an abort or an error.
    """
    futures = _stop_under_load(vllm_gateway, grace_s=5.0)
    for future in futures:
        error = future.exception()
        if error is None:
            assert future.result() == "abort"
        else:
            assert isinstance(error, openai.APIError), error
            if isinstance(error, openai.APIStatusError):
                assert error.status_code in (502, 503)
    _serves_again(vllm_gateway)


def test_gateway_knows_its_backend(vllm_gateway: EngineGateway) -> None:
    status = backend_status(vllm_gateway)
    assert status["kind"] == "vllm"
    assert status["kind_source"] == "detected"
    assert status["models"] == [vllm_gateway.engine.model]


def test_vllms_own_wait_for_first_tokens_is_read(vllm_gateway: EngineGateway) -> None:
    """With its load, the gateway reads genuine vLLM's histogram of time to first token:
    the wait placement takes off a request's time left there, streamed or not."""
    engine = vllm_gateway.engine

    def read() -> BackendLoad:
        return parse_load(httpx.get(engine.base_url + "/metrics", timeout=30).text,
                          BackendKind.VLLM)  # fmt: skip

    before = read()
    assert before.ttft_count is not None and before.ttft_sum is not None
    check_completions(vllm_gateway)  # not streamed
    after = read()
    assert after.ttft_count is not None and after.ttft_count >= before.ttft_count + 1
    wait = after.ttft_since(before)
    assert wait is not None and 0 < wait < 60, wait


def test_the_other_routes_answer_as_vllm_does(vllm_gateway: EngineGateway) -> None:
    """Issue 15: tokenize, detokenize, version and embeddings relayed as they are (this
    vLLM serves a generative model: its embeddings answer is its error, relayed too);
    model cards from the gateway, aliases with the model's max_model_len."""
    engine, gw = vllm_gateway.engine, vllm_gateway
    tokens = httpx.post(engine.base_url + "/tokenize", json={"model": engine.model,
                        "prompt": PROMPT}).json()["tokens"]  # fmt: skip
    calls = [
        ("POST", "/tokenize", {"model": engine.model, "prompt": PROMPT}),
        ("POST", "/detokenize", {"model": engine.model, "tokens": tokens}),
        ("GET", "/version", None),
        ("POST", "/v1/embeddings", {"model": engine.model, "input": ["def f():"]}),
    ]
    for method, path, body in calls:
        direct = httpx.request(method, engine.base_url + path, json=body, timeout=30)
        through = httpx.request(method, gw.url + path, json=body, timeout=30)
        assert through.status_code == direct.status_code, path
        if direct.status_code < 400:
            assert through.json() == direct.json(), path
        else:  # an error: its message, in OpenAI's shape
            assert wire.is_openai_error(through.json()), path
            assert through.json()["error"]["message"] == wire.error_message(direct.content)
    # An alias stands for the served model, as on the completion routes.
    aliased = httpx.post(gw.url + "/tokenize", json={"model": "chat", "prompt": PROMPT})
    assert aliased.json()["tokens"] == tokens
    card = next(m for m in httpx.get(engine.base_url + "/v1/models").json()["data"])
    alias = httpx.get(gw.url + "/v1/models/autocomplete").json()
    assert alias["root"] == engine.model
    assert alias["max_model_len"] == card["max_model_len"] == 16384
    own = httpx.get(f"{gw.url}/v1/models/{engine.model}").json()
    assert (own["id"], own["max_model_len"]) == (card["id"], card["max_model_len"])
    responses = httpx.post(gw.url + "/v1/responses", json={"model": engine.model, "input": "x"})
    assert responses.status_code == 501
