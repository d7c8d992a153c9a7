"""The gateway in front of llama.cpp's llama-server (built from source, a tiny GGUF).

Run with ``.venv/bin/pytest -q -m llamacpp``. The engine starts once per session (under
a second once built); every test goes through a real saber-gateway with the official
SDK. The tiny model never emits EOS, so every answer runs to ``max_tokens``.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

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

pytestmark = pytest.mark.llamacpp

PROCESSING = "llamacpp:requests_processing"
OUTCOMES = "saber_requests_total"
# Tens of seconds on 2 cores: still running whenever a test looks, however busy the machine.
LONG = 12000


def test_chat(llamacpp_gateway: EngineGateway) -> None:
    check_chat(llamacpp_gateway)


def test_completions(llamacpp_gateway: EngineGateway) -> None:
    check_completions(llamacpp_gateway)


@pytest.mark.parametrize("max_tokens", [1, 9, 64])
def test_ignore_eos_lengths_are_exact(llamacpp_gateway: EngineGateway, max_tokens: int) -> None:
    check_ignore_eos_lengths(llamacpp_gateway, max_tokens)


def test_completions_stream_with_usage(llamacpp_gateway: EngineGateway) -> None:
    """llama.cpp puts usage on the finishing chunk; the client gets it there, once."""
    engine = llamacpp_gateway.engine
    client = client_for(llamacpp_gateway.api_url)
    chunks = list(
        client.completions.create(
            model=engine.model,
            prompt=PROMPT,
            max_tokens=40,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=IGNORE_EOS,
        )
    )
    *body, last = chunks
    assert last.choices[0].finish_reason == "length"
    assert last.usage is not None
    assert last.usage.completion_tokens == 40
    assert last.usage.prompt_tokens == direct_prompt_tokens(engine, prompt=PROMPT)
    assert last.usage.total_tokens == last.usage.prompt_tokens + 40
    assert all(c.usage is None for c in body)
    assert "".join(c.choices[0].text for c in chunks)


def test_chat_stream_with_usage(llamacpp_gateway: EngineGateway) -> None:
    engine = llamacpp_gateway.engine
    client = client_for(llamacpp_gateway.api_url)
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
    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1
    assert with_usage[0] is chunks[-1]
    usage = with_usage[0].usage
    assert usage is not None
    assert usage.completion_tokens == 32
    assert usage.prompt_tokens == direct_prompt_tokens(engine, messages=MESSAGES)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _stream_without_usage_request(base_url: str, model: str, endpoint: str) -> list[Any]:
    client = client_for(base_url)
    if endpoint == "chat":
        stream = client.chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=16, stream=True, extra_body=IGNORE_EOS
        )
    else:
        stream = client.completions.create(
            model=model, prompt=PROMPT, max_tokens=16, stream=True, extra_body=IGNORE_EOS
        )
    return list(stream)


def _usage_shape(chunks: list[Any]) -> list[tuple[bool, bool]]:
    """Per chunk: whether it has choices, whether it has usage."""
    return [(bool(c.choices), c.usage is not None) for c in chunks]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_stream_without_usage_is_as_the_engine_sends_it(
    llamacpp_gateway: EngineGateway, endpoint: str
) -> None:
    """The gateway asks llama.cpp for usage anyway (to count tokens); a client that did
    not ask sees no more of it than llama.cpp itself would send: no usage chunk in chat,
    and in completions only the usage llama.cpp always puts on the finishing chunk."""
    engine = llamacpp_gateway.engine
    chunks = _stream_without_usage_request(llamacpp_gateway.api_url, engine.model, endpoint)
    direct = _stream_without_usage_request(engine.base_url + "/v1", engine.model, endpoint)
    assert _usage_shape(chunks) == _usage_shape(direct)
    assert all(c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"
    if endpoint == "chat":
        assert all(c.usage is None for c in chunks)
    else:
        assert all(c.usage is None for c in chunks[:-1])
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 16


def test_disconnect_frees_the_slot(llamacpp_gateway: EngineGateway) -> None:
    engine = llamacpp_gateway.engine
    client = client_for(llamacpp_gateway.api_url)
    settle(engine.base_url, PROCESSING, 0, timeout=10.0)
    cancelled = scrape(llamacpp_gateway.url, OUTCOMES, outcome="cancelled_running")
    with StreamReader(
        lambda: client.completions.with_streaming_response.create(
            model=engine.model, prompt=PROMPT, max_tokens=LONG, stream=True, extra_body=IGNORE_EOS
        )
    ) as reader:
        stream_started(reader, 30.0)
        settle(engine.base_url, PROCESSING, 1, timeout=20.0)
        settle(llamacpp_gateway.url, IN_FLIGHT, 1, timeout=20.0)
        settle(llamacpp_gateway.url, BACKEND_RUNNING, 1, timeout=MIRROR_S)
    # Closed: the client went away, thousands of tokens early.
    assert reader.error is None and not reader.finished
    settle(engine.base_url, PROCESSING, 0, timeout=2.0, why="llama.cpp kept the slot")
    settle(llamacpp_gateway.url, IN_FLIGHT, 0, timeout=2.0)
    assert scrape(llamacpp_gateway.url, OUTCOMES, outcome="cancelled_running") == cancelled + 1
    settle(llamacpp_gateway.url, BACKEND_RUNNING, 0, timeout=MIRROR_S)


def _long_stream(gw: EngineGateway) -> None:
    stream = client_for(gw.api_url).completions.create(
        model=gw.engine.model,
        prompt=PROMPT,
        max_tokens=LONG // 4,
        stream=True,
        extra_body=IGNORE_EOS,
    )
    for _ in stream:
        pass


def _long_completion(gw: EngineGateway) -> None:
    client_for(gw.api_url).chat.completions.create(
        model=gw.engine.model, messages=MESSAGES, max_tokens=LONG // 4, extra_body=IGNORE_EOS
    )


def test_engine_killed_mid_request_then_restarted(llamacpp_gateway: EngineGateway) -> None:
    engine = llamacpp_gateway.engine
    calls = [_long_stream, _long_stream, _long_completion, _long_completion]
    pool = concurrent.futures.ThreadPoolExecutor(len(calls))
    try:
        futures = [pool.submit(call, llamacpp_gateway) for call in calls]
        for url, name in ((llamacpp_gateway.url, IN_FLIGHT), (engine.base_url, PROCESSING)):
            settle(url, name, len(calls), timeout=60.0, why=lambda: outcomes(futures))
        engine.stop(grace_s=0)
        all_done(futures, 30.0, "a client hung after llama-server went away")
        for future in futures[:2]:
            error = future.exception()
            assert isinstance(error, openai.APIError), error
            assert not isinstance(error, openai.APIStatusError), error
        for future in futures[2:]:
            error = future.exception()
            assert isinstance(error, openai.APIStatusError), error
            assert error.status_code in (502, 503)
        settle(llamacpp_gateway.url, IN_FLIGHT, 0, timeout=2.0)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        if not engine.running:
            engine.restart()
    reply = client_for(llamacpp_gateway.api_url).completions.create(
        model=engine.model, prompt=PROMPT, max_tokens=8, extra_body=IGNORE_EOS
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 8
    assert httpx.get(llamacpp_gateway.url + "/health", timeout=10).status_code == 200


def test_llamacpps_errors_come_back_in_openai_shape_with_its_message(
    llamacpp_gateway: EngineGateway,
) -> None:
    """llama-server writes its own shape (an integer ``code``, its own type names);
    through the gateway each error has OpenAI's, its message and status kept."""
    model = llamacpp_gateway.engine.model
    chat = {"model": model, "messages": MESSAGES, "max_tokens": 4}
    check_errors_in_openai_shape(
        llamacpp_gateway,
        [
            ("POST", "/v1/completions", {"model": model, "prompt": "x " * 20_000, "max_tokens": 4}),
            ("POST", "/v1/chat/completions", {**chat, "response_format": {"type": "nope"}}),
            ("POST", "/v1/embeddings", {"model": model, "input": ["def f():"]}),
        ],
    )


def test_gateway_knows_its_backend(llamacpp_gateway: EngineGateway) -> None:
    status = backend_status(llamacpp_gateway)
    assert status["kind"] == "llamacpp"
    assert status["kind_source"] == "detected"
