"""Small servers and waits for tests: a real uvicorn on 127.0.0.1, and bounded polling."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")


@contextmanager
def serve_app(app: Any, lifespan: Literal["auto", "on", "off"] = "auto") -> Iterator[str]:
    """Serve an ASGI app under uvicorn on a free 127.0.0.1 port, in a thread; yields its URL.

    The socket is bound before the thread starts, so the port cannot be taken between
    choosing it and serving on it.
    """
    import uvicorn  # only tests that serve something pay for it

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, log_config=None, lifespan=lifespan
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, step: float = 0.02) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` passes; one last try at the end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def wait_for(
    observe: Callable[[], T],
    until: Callable[[T], object] = bool,
    *,
    timeout: float = 5.0,
    describe: str | Callable[[], object] = "the condition",
    step: float = 0.02,
    retry_on: tuple[type[Exception], ...] = (),
) -> T:
    """Poll ``observe()`` until ``until(value)`` holds; return that value.

    Past ``timeout`` (one last try at the end) it raises AssertionError naming what was
    awaited (``describe``: text, or a callable for figures read at that moment), for how
    long, and the last value observed. An exception of a type in ``retry_on`` counts as
    "not yet" (and is the last value seen); any other propagates at once.
    """
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    polls = 0
    while True:
        last_try = time.monotonic() >= deadline
        polls += 1
        try:
            value: Any = observe()
        except retry_on as exc:
            value = exc
        else:
            if until(value):
                return value  # type: ignore[no-any-return]
        if last_try:
            break
        time.sleep(step)
    what = describe() if callable(describe) else describe
    raise AssertionError(
        f"waited {time.monotonic() - started:.1f} s ({polls} polls) for {what}; "
        f"last observed: {value!r}"
    )


@contextmanager
def held_request(url: str, body: dict[str, Any]) -> Iterator[socket.socket]:
    """POST ``body`` (JSON) to ``url`` on a raw socket, read nothing, and hang up when
    the block ends: a client that leaves when the test says, not on a timer."""
    parts = urlsplit(url)
    data = json.dumps(body).encode()
    head = (
        f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(head + data)
        yield s
