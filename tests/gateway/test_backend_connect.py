"""Connecting to the backend: a backend slow to accept is waited for within the connect
timeout, a refusing one is a 503 at once (test_backend_faults.py), and a connect the
kernel completed is not timed out because the gateway's own loop was busy."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvloop
from gateway_support import GatewayFactory

from harness import metric_value
from saber.gateway.upstream.connect import within

EVENTS = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}\n\n'
    b"data: [DONE]\n\n"
)
ACCEPT_AFTER_S = 0.6  # below the kernel's first SYN retransmission (1 s)
REQUESTS = 6


class SlowAcceptor:
    """A backend whose listen queue holds one connection (``listen(1)``) and which
    accepts nothing until ``go()`` was called ``ACCEPT_AFTER_S`` ago: the kernel drops
    the SYNs it has no room for, and the clients' kernels send them again after a
    second. Each request is answered with a short stream, then the connection closed."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._open = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> SlowAcceptor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._open.set()
        self.sock.close()
        self._thread.join(5)

    def go(self) -> None:
        threading.Timer(ACCEPT_AFTER_S, self._open.set).start()

    def _accept(self) -> None:
        self._open.wait()
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=_answer, args=(conn, self.heads), daemon=True).start()


def _answer(conn: socket.socket, heads: list[bytes]) -> None:
    with conn:
        conn.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        heads.append(head.split(b"\r\n")[0])
        length = next(
            (int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
             if k.strip().lower() == b"content-length"),
            0,
        )  # fmt: skip
        while len(body) < length:
            body += conn.recv(65536)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            + EVENTS
        )


@pytest.fixture
def slow() -> Iterator[SlowAcceptor]:
    with SlowAcceptor() as backend:
        yield backend


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_backend_slow_to_accept_is_waited_for(
    gateway_factory: GatewayFactory, slow: SlowAcceptor, transport: str
) -> None:
    gw = gateway_factory(
        slow.url,
        **{
            "backend.kind": "vllm",
            "backend.model": "m",
            "backend.metrics_interval_s": 0,
            "backend.transport": transport,
            "backend.connect_timeout_s": 2.0,
        },
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=10) as client:
            url = gw.url + "/v1/chat/completions"
            return await asyncio.gather(*(client.post(url, json=body) for _ in range(REQUESTS)))

    slow.go()
    started = time.monotonic()
    answers = asyncio.run(burst())
    took = time.monotonic() - started
    assert [r.status_code for r in answers] == [200] * REQUESTS, [
        r.text[:300] for r in answers if r.status_code != 200
    ]
    assert all(r.text.endswith("data: [DONE]\n\n") and '"ok"' in r.text for r in answers)
    completions = [h for h in slow.heads if h.startswith(b"POST /v1/chat/completions ")]
    assert len(completions) >= REQUESTS  # a connection reset before its answer goes again
    # Waited for: the SYNs the full queue dropped go again after 1 s, and a connection
    # the kernel reset before its answer goes again (once more a second, at worst).
    assert ACCEPT_AFTER_S <= took < 4.0
    text = httpx.get(gw.url + "/metrics").text
    assert metric_value(text, "saber_requests_total", outcome="served") == REQUESTS


def test_a_connect_the_kernel_completed_survives_a_busy_loop() -> None:
    """The loop is blocked (a burst of arrivals) for longer than the connect timeout
    right after a connect began: the kernel completed it, so it is not a timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]

    async def connect() -> bool:
        loop = asyncio.get_running_loop()
        loop.call_soon(time.sleep, 0.4)  # the busy loop, after the connect has begun
        _, writer = await within(asyncio.open_connection("127.0.0.1", port), 0.1)
        writer.close()
        return True

    try:
        assert uvloop.run(connect())  # uvloop: timers run before the poll for I/O
    finally:
        listener.close()


def test_a_backend_that_never_accepts_times_out_at_the_deadline() -> None:
    """A listen queue that is full drops the SYN: nothing completes, and the connect
    fails at its deadline, not later."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)  # room for one connection, which the filler takes
    port = listener.getsockname()[1]
    fillers = [socket.create_connection(("127.0.0.1", port), timeout=1)]

    async def connect() -> float:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await within(asyncio.open_connection("127.0.0.1", port), 0.3)
        return time.monotonic() - started

    try:
        took = uvloop.run(connect())
        assert 0.25 <= took < 0.8  # the deadline (0.3 s), give or take a timer's tick
    finally:
        for s in fillers:
            s.close()
        listener.close()
