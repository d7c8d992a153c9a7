"""Client connections: headers must arrive within header_timeout_s, and past
max_client_connections a new connection gets a clean 503, not a reset."""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
from fake_vllm import MODEL, FakeVllm
from gateway_support import GatewayFactory, start_fake

from harness import metric_value, wait_for
from saber.gateway import RunningGateway

REQUEST = (
    b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n"
)
BODY = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 2}).encode()


def connect(gw: RunningGateway) -> socket.socket:
    url = urlsplit(gw.url)
    return socket.create_connection((url.hostname, url.port), timeout=10)


def read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def refused(gw: RunningGateway, reason: str) -> float:
    text = httpx.get(gw.url + "/metrics").text
    return metric_value(text, "saber_connections_refused_total", reason=reason)


def connections(gw: RunningGateway) -> float | None:
    return gw.gateway.metrics.registry.get_sample_value("saber_client_connections")


def test_slow_headers_are_cut_off(gateway_factory: GatewayFactory) -> None:
    """Defect 4 (issue 14): connections sending their headers a byte a second stayed
    open for ever (uvicorn has no header timeout), and with the file limit reached new
    clients were reset. Now headers not in within header_timeout_s get a 408 and the
    connection is closed, while other clients are served."""
    gw = start_fake(gateway_factory, FakeVllm(), header_timeout_s=0.5)
    head = REQUEST % len(BODY)
    answers: list[bytes] = []
    took: list[float] = []
    opened: list[socket.socket] = []

    def slowloris() -> None:
        with connect(gw) as s:
            opened.append(s)
            started = time.monotonic()
            try:
                for byte in head:
                    s.sendall(bytes([byte]))
                    time.sleep(0.1)
            except OSError:
                pass  # closed under it
            answers.append(read_all(s))
            took.append(time.monotonic() - started)

    clients = [threading.Thread(target=slowloris) for _ in range(20)]
    for c in clients:
        c.start()
    # Another client comes while the 20 hold their connections.
    wait_for(lambda: len(opened), lambda n: n == 20, describe="20 slow connections open")
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
    assert httpx.post(gw.url + "/v1/completions", json=body, timeout=5).status_code == 200
    for c in clients:
        c.join(10)
    assert len(answers) == 20
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
    assert max(took) < 3.0
    assert refused(gw, "header_timeout") == 20
    wait_for(lambda: connections(gw), lambda n: n == 0, describe="every connection closed")


def test_a_silent_connection_is_closed_and_a_kept_alive_one_is_not(
    gateway_factory: GatewayFactory,
) -> None:
    gw = start_fake(gateway_factory, FakeVllm(), header_timeout_s=0.3)
    with connect(gw) as silent:
        started = time.monotonic()
        assert read_all(silent).startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - started < 2.0
    # A kept-alive connection idle between requests is the keep-alive timeout's (75 s).
    with connect(gw) as s:
        for _ in range(2):
            s.sendall(REQUEST % len(BODY) + BODY)
            reply = s.recv(65536)
            assert reply.startswith(b"HTTP/1.1 200 "), reply[:80]
            time.sleep(0.8)
        # A second request whose headers then stall is cut off in its turn.
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\n")
        assert read_all(s).startswith(b"HTTP/1.1 408 ")


def test_past_the_limit_a_connection_gets_a_clean_503(gateway_factory: GatewayFactory) -> None:
    gw = start_fake(gateway_factory, FakeVllm(), max_client_connections=4, header_timeout_s=30)
    held = [connect(gw) for _ in range(4)]
    try:
        wait_for(lambda: connections(gw), lambda n: n == 4, describe="4 connections held")
        for _ in range(3):
            with connect(gw) as extra:
                extra.sendall(REQUEST % len(BODY) + BODY)
                answer = read_all(extra)  # no ConnectionResetError
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 "), answer[:80]
            assert b"retry-after: 1" in head and b"connection: close" in head
            assert json.loads(body)["error"]["code"] == "too_many_connections"
    finally:
        for s in held:
            s.close()
    wait_for(lambda: connections(gw), lambda n: n == 0, describe="every connection closed")
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
    assert httpx.post(gw.url + "/v1/completions", json=body).status_code == 200
    assert refused(gw, "limit") == 3


def test_a_low_file_limit_caps_client_connections() -> None:
    from saber.gateway.server import client_cap

    assert client_cap(128) == 32
    assert client_cap(4096) == 2016
    assert client_cap(10) == 8
