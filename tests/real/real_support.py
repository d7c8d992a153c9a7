"""Helpers for the real-engine tiers (imported as a module; fixtures live in tests/conftest)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import httpx
from openai import OpenAI

from saber.testing import EngineGateway, scrape

IN_FLIGHT = "saber_requests_in_flight"
BACKEND_RUNNING = "saber_backend_requests_running"
# The test gateways read the engine's /metrics every 5 s (tests/conftest.py); a read can
# fail on a busy 2-core machine: a few chances.
MIRROR_S = 20.0


def client_for(base_url: str) -> OpenAI:
    """The official SDK, no retries (a retry would hide the error under test), bounded."""
    return OpenAI(
        base_url=base_url,
        api_key="unused",
        max_retries=0,
        timeout=httpx.Timeout(150.0, connect=10.0),  # past the test gateway's own 120 s
    )


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def settles_to(base_url: str, name: str, value: float, timeout: float) -> bool:
    """Whether the metric ``name`` at ``base_url`` reads ``value`` within ``timeout``; a
    read that fails or is slow (a busy engine answers /metrics late) counts as not yet."""

    def reads_value() -> bool:
        try:
            return scrape(base_url, name, timeout=max(1.0, min(timeout, 5.0))) == value
        except httpx.HTTPError:
            return False

    return wait_until(reads_value, timeout)


def backend_status(gw: EngineGateway) -> dict[str, Any]:
    """The ``backend`` section of the gateway's /saber/status."""
    status = httpx.get(gw.url + "/saber/status", timeout=10).raise_for_status().json()
    return dict(status["backend"])


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
