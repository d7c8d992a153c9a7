"""Running the app on uvicorn: one worker, uvloop and httptools when installed.

``serve`` blocks (the CLI); ``start_in_thread`` runs a real server on its own
thread and event loop, on a free port when asked for port 0 (tests, the demo).
"""

from __future__ import annotations

import gc
import socket
import threading
from dataclasses import dataclass

import httpx
import uvicorn

from saber._serving import bind, run_in_thread, stop_thread
from saber.gateway.app import GatewayApp, create_app
from saber.gateway.settings import GatewaySettings
from saber.gateway.state import Gateway


def uvicorn_config(app: GatewayApp) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        loop="auto",  # uvloop when installed
        http="auto",  # httptools when installed
        lifespan="on",
        access_log=False,  # the gateway writes its own line per request
        log_config=None,
        log_level="warning",
        timeout_keep_alive=75,
        timeout_graceful_shutdown=5,
        backlog=2048,
    )


def serve(settings: GatewaySettings, sock: socket.socket | None = None) -> None:
    """Serve until interrupted (SIGINT/SIGTERM)."""
    cfg = settings.config
    sock = sock or bind(cfg.host, cfg.port)
    server = uvicorn.Server(uvicorn_config(create_app(settings)))
    # What is loaded by now (FastAPI, pydantic, numpy, scipy...) lives as long as the
    # process. Frozen, it is left out of the collector's full passes, which otherwise
    # stall the event loop for 30-50 ms now and then: a p99 TTFT spike, every stream.
    gc.collect()
    gc.freeze()
    server.run(sockets=[sock])


@dataclass
class RunningGateway:
    """A gateway serving on a background thread; stop it with ``stop()`` or ``with``."""

    url: str
    app: GatewayApp
    server: uvicorn.Server
    thread: threading.Thread

    @property
    def gateway(self) -> Gateway:
        return self.app.gateway

    def stop(self, timeout: float = 10.0) -> None:
        stop_thread(self.server, self.thread, timeout)

    def __enter__(self) -> RunningGateway:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_in_thread(
    settings: GatewaySettings,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    trace: bool = False,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout: float = 15.0,
) -> RunningGateway:
    """Start a real uvicorn server for ``settings`` and wait until it accepts."""
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    app = create_app(settings, trace=trace, transport=transport)
    server = uvicorn.Server(uvicorn_config(app))
    thread = run_in_thread(server, name="saber-gateway", timeout=timeout, sockets=[sock])
    return RunningGateway(f"http://{host}:{bound_port}", app, server, thread)
