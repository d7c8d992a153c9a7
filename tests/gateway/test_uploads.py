"""Request bodies that never arrive whole: the client hangs up on the way, or sends too
slowly. Each is a request the gateway counts and logs, and nothing of it reaches
the scheduler."""

from __future__ import annotations

import json
import logging
import socket
import time
from urllib.parse import urlsplit

import pytest
from fake_vllm import FakeVllm
from gateway_support import GatewayFactory, requests_total, start_fake

from harness import wait_for
from saber.gateway import RunningGateway
from saber.gateway.observe.logs import REQUEST_LOGGER


def connect(gw: RunningGateway) -> socket.socket:
    url = urlsplit(gw.url)
    return socket.create_connection((url.hostname, url.port), timeout=5)


def head(length: int, task: str | None = None) -> bytes:
    extra = f"X-Saber-Task: {task}\r\n" if task else ""
    return (
        "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [r.__dict__ for r in caplog.records if r.name == REQUEST_LOGGER]


def test_a_hang_up_during_the_upload_is_counted_and_logged(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Defect 9 (issue 14): a client that hung up before its body had arrived was
    neither counted nor logged. Now it is ``cancelled_upload`` (499), with its log
    line, and with the task type its header named."""
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake, trace=True, log_requests=True)
    drain = gw.gateway.drain
    with caplog.at_level(logging.INFO, logger=REQUEST_LOGGER):
        for logged, task in enumerate((None, "code_qna"), start=1):
            with connect(gw) as s:
                s.sendall(head(1000, task) + b'{"prompt": "')
                # Hang up once the gateway holds the request, waiting for the rest.
                wait_for(lambda: drain.active, lambda n: n == 1, describe="the request held")
            wait_for(
                lambda: lines(caplog),
                lambda seen, n=logged: len(seen) == n,
                describe=f"{logged} request log line(s)",
            )
            wait_for(lambda: drain.active, lambda n: n == 0, describe="the request let go")
    assert requests_total(gw, "cancelled_upload") == 2 == requests_total(gw)
    logged = lines(caplog)
    assert [(x["outcome"], x["status"]) for x in logged] == [("cancelled_upload", 499)] * 2
    assert [x["task"] for x in logged] == ["unknown", "code_qna"]
    assert fake.posts == [] and not gw.gateway.admission.trace


def test_a_body_too_slow_is_408(gateway_factory: GatewayFactory) -> None:
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake, body_timeout_s=0.3)
    with connect(gw) as s:
        s.sendall(head(100) + b'{"prompt": "x", ')
        started = time.monotonic()
        reply = s.recv(4096)
        took = time.monotonic() - started
        rest = s.recv(4096)
    assert 0.2 < took < 2.0
    status, _, body = reply.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 408")
    assert b"connection: close" in status.lower()
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert rest == b""  # closed after the answer
    assert requests_total(gw, "upload_timeout") == 1 == requests_total(gw)
    assert fake.posts == []
