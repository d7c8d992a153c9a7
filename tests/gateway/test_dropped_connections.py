"""A backend that drops kept-alive connections without notice (llama-server does, when
its HTTP threads are all taken): the gateway sends the request again on a new
connection, with either upstream transport, and the client never sees it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import httpx
import pytest
from gateway_support import GatewayFactory

from harness import metric_value

REPLY = {
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


class DroppingBackend:
    """HTTP/1.1 on a thread that answers the first request of each connection, with
    keep-alive, and drops the connection without a word when a second one comes on it:
    a server that closed a kept-alive connection just as the client reused it.
    ``answered`` counts the completions answered (the gateway also sends GETs)."""

    def __init__(self) -> None:
        self.connections = 0
        self.answered = 0
        self.dropped = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DroppingBackend:
        self._thread.start()
        assert self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        self._ready.set()
        self._loop.run_forever()
        server.close()
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        self._loop.run_until_complete(asyncio.sleep(0))
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await _read_request(reader)
            self.answered += head.startswith(b"POST /v1/completions ")
            body = json.dumps(REPLY).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: keep-alive\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
            await _read_request(reader)
            self.dropped += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return head


@pytest.fixture
def dropping() -> Iterator[DroppingBackend]:
    with DroppingBackend() as backend:
        yield backend


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_dropped_keep_alive_connection_is_not_the_clients_problem(
    gateway_factory: GatewayFactory, dropping: DroppingBackend, transport: str
) -> None:
    gw = gateway_factory(
        dropping.url,
        **{
            "backend.kind": "vllm",
            "backend.model": "m",
            "backend.metrics_interval_s": 0,
            "backend.transport": transport,
        },
    )
    for _ in range(3):
        resp = httpx.post(gw.url + "/v1/completions", json={"model": "m", "prompt": "x"})
        assert resp.status_code == 200, resp.text
        assert resp.json()["choices"][0]["text"] == " ok"
    # Each request after the first was dropped on its pooled connection and went again.
    assert dropping.answered == 3
    assert dropping.dropped >= 2
    text = httpx.get(gw.url + "/metrics").text
    assert metric_value(text, "saber_requests_in_flight") == 0
    assert gw.gateway.scheduler.load == 0
