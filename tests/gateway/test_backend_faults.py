"""A backend that is down, fails, stalls or breaks off: fast, named answers, no hangs,
no leaked slots, and recovery when it comes back."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from gateway_support import GatewayFactory, sim_running

from harness import metric_value, wait_for
from saber.gateway import RunningGateway
from saber.gateway.upstream.client import classify
from saber.sim.http import RunningSim, serve_in_thread

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


@pytest.fixture
def faulty() -> Iterator[RunningSim]:
    """A sim of its own: faults are set on the whole server."""
    with serve_in_thread(time_scale=20.0) as running:
        yield running


def set_faults(sim: RunningSim, **faults: float) -> None:
    resp = httpx.post(sim.url + "/sim/faults", json=faults)
    assert resp.status_code == 200, resp.text


def post(gw: RunningGateway, sim: RunningSim, **extra: object) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions", json={"model": sim.model, **CHAT, **extra}, timeout=10
    )


def counted(gw: RunningGateway, outcome: str) -> float:
    return metric_value(
        httpx.get(gw.url + "/metrics").text, "saber_requests_total", outcome=outcome
    )


def test_backend_down_answers_503_fast_then_recovers(
    gateway_factory: GatewayFactory, faulty: RunningSim
) -> None:
    gw = gateway_factory(faulty.url)
    assert post(gw, faulty).status_code == 200  # warm: a keep-alive connection in the pool
    set_faults(faulty, refuse_for=1.5)
    started = time.monotonic()
    resp = post(gw, faulty)
    took = time.monotonic() - started
    assert resp.status_code == 503
    assert resp.json()["error"]["code"] == "backend_unavailable"
    assert resp.headers["x-saber-outcome"] == "backend_unavailable"
    assert resp.headers["retry-after"] == "1"
    assert took < 0.5
    health = httpx.get(gw.url + "/health")
    assert health.status_code == 503 and health.json()["backend"]["reachable"] is False
    # The backend comes back: so does the gateway, with no restart.
    wait_for(
        lambda: post(gw, faulty).status_code,
        lambda code: code == 200,
        timeout=5,
        step=0.1,
        describe="a 200 once the backend is back",
    )
    assert httpx.get(gw.url + "/health").status_code == 200
    assert gw.gateway.scheduler.load == 0


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_nothing_listening_is_503_fast(gateway_factory: GatewayFactory, transport: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends
    gw = gateway_factory(f"http://127.0.0.1:{port}", **{"backend.transport": transport})
    started = time.monotonic()
    resp = httpx.post(gw.url + "/v1/completions", json={"model": "m", "prompt": "x"})
    assert resp.status_code == 503 and time.monotonic() - started < 0.5
    err = resp.json()["error"]
    assert err["type"] == "server_error"
    # Not httpx-aiohttp's "ConnectTimeout", nor httpx's "All connection attempts failed".
    assert err["message"] == "the backend is unreachable (connection refused)"
    health = httpx.get(gw.url + "/health").json()
    assert health["backend"]["error"] == "the backend is unreachable (connection refused)"
    assert httpx.get(gw.url + "/v1/models").status_code == 503
    text = httpx.get(gw.url + "/metrics").text
    assert metric_value(text, "saber_backend_errors_total", kind="connect") == 1
    assert metric_value(text, "saber_requests_in_flight") == 0


def test_a_connect_timeout_stays_a_timeout() -> None:
    def silent(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("timed out")

    with (
        httpx.Client(transport=httpx.MockTransport(silent)) as client,
        pytest.raises(httpx.ConnectTimeout) as info,
    ):
        client.get("http://backend/")
    failure = classify(info.value, streaming=False)
    assert failure.kind == "connect"
    assert failure.message == "the backend is unreachable (ConnectTimeout: timed out)"


def test_backend_500_becomes_502(gateway_factory: GatewayFactory, faulty: RunningSim) -> None:
    gw = gateway_factory(faulty.url)
    set_faults(faulty, error_rate=1.0)
    resp = post(gw, faulty)
    assert resp.status_code == 502
    assert "injected fault" in resp.json()["error"]["message"]
    assert resp.headers["x-saber-outcome"] == "backend_error"
    assert counted(gw, "backend_error") == 1
    assert gw.gateway.scheduler.load == 0


def test_stall_non_streaming_is_504(gateway_factory: GatewayFactory, faulty: RunningSim) -> None:
    gw = gateway_factory(faulty.url, **{"backend.read_timeout_s": 0.3})
    set_faults(faulty, stall_prob=1.0, stall_after=0)
    resp = post(gw, faulty)
    assert resp.status_code == 504
    assert resp.json()["error"]["code"] == "backend_timeout"
    wait_for(lambda: sim_running(faulty), lambda n: n == 0, describe="saber-sim idle")
    assert gw.gateway.scheduler.load == 0


def test_stall_mid_stream_ends_with_an_error_event(
    gateway_factory: GatewayFactory, faulty: RunningSim
) -> None:
    gw = gateway_factory(faulty.url, **{"backend.read_timeout_s": 0.3})
    set_faults(faulty, stall_prob=1.0, stall_after=2)
    body = {"model": faulty.model, **CHAT, "max_tokens": 20, "stream": True}
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, timeout=5) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    assert len([line for line in lines if '"content"' in line]) >= 1
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert (error["code"], error["type"]) == ("backend_timeout", "server_error")
    assert error["message"] == "the backend stopped sending"
    assert counted(gw, "backend_timeout") == 1
    wait_for(lambda: sim_running(faulty), lambda n: n == 0, describe="saber-sim idle")
    assert gw.gateway.scheduler.load == 0


class BrokenStream(httpx.AsyncByteStream):
    """Two chunks, then the connection drops."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
        yield b'data: {"choices":[{"index":0,"text":"b","finish_reason":null}]}\n\n'
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body"
        )


def test_connection_reset_mid_stream(gateway_factory: GatewayFactory) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=BrokenStream()
        )

    gw = gateway_factory("http://backend.invalid", transport=httpx.MockTransport(handler))
    body = {"model": "m", "prompt": "x", "stream": True}
    with httpx.stream("POST", gw.url + "/v1/completions", json=body, timeout=5) as r:
        lines = [line for line in r.iter_lines() if line]
    assert len(lines) == 4 and lines[-1] == "data: [DONE]"
    event = json.loads(lines[2].removeprefix("data: "))
    assert (event["error"]["code"], event["error"]["type"]) == ("backend_error", "server_error")
    # /v1/completions: a finished choice too, for Tabby's client (wire.stream_error).
    assert event["choices"] == [
        {"index": 0, "text": "", "logprobs": None, "finish_reason": "error"}
    ]
    text = httpx.get(gw.url + "/metrics").text
    assert metric_value(text, "saber_backend_errors_total", kind="stream_broken") == 1
    assert metric_value(text, "saber_generated_tokens_total") == 2
    assert gw.gateway.scheduler.load == 0


def test_llamacpp_usage_shape_end_to_end(gateway_factory: GatewayFactory) -> None:
    """Usage on the finishing chunk (llama.cpp's completions shape), from a backend
    whose kind is unknown (this fake answers every path with the stream, so it is
    served as vLLM): the gateway asked for that usage, so the chunk stays and its
    usage goes. A known llama.cpp keeps it: test_backend_kind.py."""
    seen: list[dict[str, object]] = []
    usage = {"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}
    wire = (
        b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":'
        + json.dumps(usage).encode()
        + b"}\n\ndata: [DONE]\n\n"
    )

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        assert "authorization" not in request.headers and "x-saber-task" not in request.headers
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=wire)

    gw = gateway_factory("http://backend.invalid", transport=httpx.MockTransport(handler))
    body = {"model": "m", "prompt": "x", "stream": True, "max_tokens": 7}
    with httpx.stream(
        "POST",
        gw.url + "/v1/completions",
        json=body,
        headers={
            "x-saber-task": "code_qna",
            "authorization": "Bearer client-key",
            "connection": "keep-alive",
        },
    ) as r:
        events = [line for line in r.iter_lines() if line]
    assert seen[0]["stream_options"] == {"include_usage": True}  # asked of the backend
    assert len(events) == 3
    last = json.loads(events[1].removeprefix("data: "))
    assert "usage" not in last and last["choices"][0]["finish_reason"] == "length"
    text = httpx.get(gw.url + "/metrics").text
    assert metric_value(text, "saber_generated_tokens_total", task="code_qna") == 7
