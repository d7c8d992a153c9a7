"""Helpers for the real-engine tiers (imported as a module; fixtures live in tests/conftest)."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI, Timeout

from harness import EngineGateway, EngineProcess, scrape, wait_for
from saber import wire
from saber.config import load_gateway_config
from saber.gateway import settings_from_config, start_in_thread
from saber.speed import load_profile

IN_FLIGHT = "saber_requests_in_flight"
BACKEND_RUNNING = "saber_backend_requests_running"
# The test gateways read the engine's /metrics every 5 s (tests/conftest.py); a read can
# fail on a busy 2-core machine: a few chances.
MIRROR_S = 20.0
PROMPT = "def grungthoproom(shainshio):\n    return"
MESSAGES = [{"role": "user", "content": "Pex nartpre prim wim?"}]
IGNORE_EOS = {"ignore_eos": True}


def client_for(base_url: str) -> OpenAI:
    """The official SDK, no retries (a retry would hide the error under test), bounded."""
    return OpenAI(
        base_url=base_url,
        api_key="unused",
        max_retries=0,
        timeout=Timeout(150.0, connect=10.0),  # past the test gateway's own 120 s; the SDK's
        # own type (openai 3 is built on httpx2, whose Timeout is not httpx's)
    )


def settle(
    base_url: str, name: str, value: float, timeout: float, why: str | Callable[[], object] = ""
) -> None:
    """Wait until the metric ``name`` at ``base_url`` reads ``value``; past ``timeout``,
    AssertionError with the last value read (and ``why``: text, or a callable read then).
    A read that fails or is slow (a busy engine answers /metrics late) counts as not yet."""

    def describe() -> str:
        reason = why() if callable(why) else why
        return f"{name} at {base_url} to read {value:g}" + (f" ({reason})" if reason else "")

    wait_for(
        lambda: scrape(base_url, name, timeout=max(1.0, min(timeout, 5.0))),
        lambda read: read == value,
        timeout=timeout,
        step=0.05,
        describe=describe,
        retry_on=(httpx.HTTPError,),
    )


def stream_started(reader: StreamReader, timeout: float) -> None:
    """Wait until ``reader`` has read three SSE events; past ``timeout``, AssertionError
    with the count and the reader's error, if any."""
    wait_for(
        lambda: reader.events,
        lambda events: events >= 3,
        timeout=timeout,
        describe=lambda: f"three SSE events of the stream (reader's error: {reader.error!r})",
    )


def all_done(futures: Sequence[Future[Any]], timeout: float, what: str) -> None:
    """Wait until every future is done; past ``timeout``, AssertionError naming ``what``
    hung and what each future came to."""
    _, pending = concurrent.futures.wait(futures, timeout=timeout)
    assert not pending, f"{what} after {timeout:g} s: {outcomes(futures)}"


def outcomes(futures: Sequence[Future[Any]]) -> list[object]:
    """What each future came to so far: its exception, its result, or "running"."""
    return ["running" if not f.done() else f.exception() or f.result() for f in futures]


def admission_digest(gw: EngineGateway) -> dict[str, Any]:
    """What the gateway's admission saw at this moment (its /saber/status, cut down), for
    a failure message when requests it should have run together did not run together:
    the speed it predicts, what it learned (calibration, refit), its queues and its last
    decisions."""
    try:
        status = gateway_status(gw)
    except httpx.HTTPError as exc:
        return {"status": repr(exc)}
    return {
        key: status[key]
        for key in ("load", "predicted_speed_tokens_per_s", "calibration", "learning")
    } | {
        "queues": {t: q for t, q in status["queues"].items() if any(q.values())},
        "recent_decisions": status["recent_decisions"][-6:],
    }


def gateway_status(gw: EngineGateway) -> dict[str, Any]:
    """The gateway's /saber/status (an HTTP error raises)."""
    status: dict[str, Any] = (
        httpx.get(gw.url + "/saber/status", timeout=10).raise_for_status().json()
    )
    return status


def backend_status(gw: EngineGateway) -> dict[str, Any]:
    """The ``backend`` section of the gateway's /saber/status."""
    return dict(gateway_status(gw)["backend"])


class StreamReader:
    """A streaming request read on a thread, as a live client reads it, until ``close()``
    (or the end of the ``with`` block) makes the client go away mid-stream.

    It reads the SDK's raw response (``with_streaming_response``) and parses nothing, so
    that the test process, which also reads metrics, stays light on 2 cores.
    """

    def __init__(self, open_stream: Callable[[], AbstractContextManager[Any]]) -> None:
        self.events = 0  # SSE data lines so far
        self.error: BaseException | None = None
        self.finished = False  # the stream reached data: [DONE]
        self._context = open_stream()
        self._response = self._context.__enter__()  # returns once the headers are in
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True, name="stream-reader")
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in self._response.iter_lines():
                if line.startswith("data:"):
                    self.events += 1
                    self.finished = line == "data: [DONE]"
                if self._stop.is_set():
                    return
        except Exception as exc:
            self.error = exc
        finally:
            self._response.close()

    def close(self, timeout: float = 10.0) -> None:
        """Go away: stop reading and close the connection."""
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():  # no line came to notice the stop: close from here
            self._response.close()
            self._thread.join(timeout)
        self._context.__exit__(None, None, None)

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def direct_prompt_tokens(engine: EngineProcess, **request: Any) -> int:
    """What the engine itself counts for the prompt of ``request`` (sent straight to it)."""
    client = client_for(engine.base_url + "/v1")
    if "messages" in request:
        reply = client.chat.completions.create(model=engine.model, max_tokens=1, **request)
    else:
        reply = client.completions.create(model=engine.model, max_tokens=1, **request)
    assert reply.usage is not None
    return reply.usage.prompt_tokens


# The checks both engines must pass the same way through the gateway; each tier's own
# file adds what differs (usage shapes, metric names, errors).


def check_chat(gw: EngineGateway) -> Any:
    """A chat completion with exact usage; returns the reply for engine-specific checks."""
    engine = gw.engine
    reply = client_for(gw.api_url).chat.completions.create(
        model=engine.model, messages=MESSAGES, max_tokens=24, extra_body=IGNORE_EOS
    )
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 24
    assert reply.usage.prompt_tokens == direct_prompt_tokens(engine, messages=MESSAGES)
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 24
    return reply


def check_completions(gw: EngineGateway) -> None:
    engine = gw.engine
    reply = client_for(gw.api_url).completions.create(
        model=engine.model, prompt=PROMPT, max_tokens=17, extra_body=IGNORE_EOS
    )
    assert reply.choices[0].text
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 17
    assert reply.usage.prompt_tokens == direct_prompt_tokens(engine, prompt=PROMPT)
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 17


def check_ignore_eos_lengths(gw: EngineGateway, max_tokens: int) -> None:
    client = client_for(gw.api_url)
    model = gw.engine.model
    chat = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=max_tokens, extra_body=IGNORE_EOS
    )
    text = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=max_tokens, extra_body=IGNORE_EOS
    )
    assert chat.usage is not None and text.usage is not None
    assert chat.usage.completion_tokens == max_tokens
    assert text.usage.completion_tokens == max_tokens


Call = tuple[str, str, dict[str, Any] | None]
"""(method, path, JSON body) of one request."""


def check_errors_in_openai_shape(gw: EngineGateway, calls: Sequence[Call]) -> None:
    """Each call's error, straight from the engine and through the gateway: the same
    status, and through the gateway OpenAI's ``{"error": {"message", "type", "param",
    "code"}}`` with the engine's own message (issue 48: vLLM's body with its integer code
    and exception name, and llama.cpp's, came back as the engines wrote them)."""
    for method, path, body in calls:
        direct = httpx.request(method, gw.engine.base_url + path, json=body, timeout=120)
        through = httpx.request(method, gw.url + path, json=body, timeout=120)
        assert direct.status_code >= 400, (path, direct.text[:300])
        assert through.status_code == direct.status_code, (path, through.text[:300])
        assert wire.is_openai_error(through.json()), (path, direct.text[:300], through.text)
        err = through.json()["error"]
        assert err["message"] == wire.error_message(direct.content, limit=2000), path
        assert err["type"] == wire.error_type(direct.status_code), path
        assert err["code"] == "backend_rejected" or direct.status_code >= 500, path


def served_profile(engine: EngineProcess, path: Path) -> dict[str, Any]:
    """Start a gateway in front of ``engine`` with the profile at ``path``; its
    /saber/status, after checking that it shows that profile and its f(1)."""
    profile = load_profile(path)
    overrides = {"backend.url": engine.base_url, "profile": str(path)}
    gw = start_in_thread(settings_from_config(load_gateway_config(env={}, overrides=overrides)))
    try:
        status = httpx.get(gw.url + "/saber/status", timeout=10).json()
    finally:
        gw.stop()
    assert status["profile"]["path"] == str(path)
    assert status["profile"]["kind"] == profile.kind
    assert status["profile"]["params"] == profile.params
    f1 = profile.speed_model().predict(1.0)
    assert status["predicted_speed_tokens_per_s"]["max"] == pytest.approx(f1)
    return status
