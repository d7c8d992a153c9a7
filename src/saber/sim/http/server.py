"""Running saber-sim under uvicorn: from the CLI, in a thread, or in a running loop."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI

from saber._serving import run_in_thread, stop_thread
from saber.sim.http.app import SimState, create_app
from saber.sim.http.settings import SimSettings


class SimServer(uvicorn.Server):
    """uvicorn's server, plus the hook that lets saber-sim refuse connections."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.app = app
        self.sim: SimState = app.state.sim
        self.ready = False  # listening (or refusing on purpose), port known

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self.servers:
            self.sim.listener.attach(self)
            refuse_for = self.sim.settings.faults.refuse_for
            if refuse_for > 0:
                self.sim.listener.refuse(refuse_for)
            self.ready = True


@dataclass(frozen=True)
class RunningSim:
    """A saber-sim server running in this process.

    ``url`` is ``http://HOST:PORT`` (for /health, /metrics); ``api_url`` adds
    ``/v1`` (the OpenAI ``base_url``); ``model`` is the served model name.
    """

    url: str
    port: int
    model: str
    settings: SimSettings
    app: FastAPI

    @property
    def api_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def state(self) -> SimState:
        return self.app.state.sim  # type: ignore[no-any-return]


def make_server(
    settings: SimSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    log_level: str = "warning",
    access_log: bool = False,
    configure_logging: bool = False,
    graceful_shutdown_s: int = 2,
) -> SimServer:
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=access_log,
        log_config=uvicorn.config.LOGGING_CONFIG if configure_logging else None,
        lifespan="on",
        timeout_graceful_shutdown=graceful_shutdown_s,
    )
    return SimServer(config, app)


def _settings(settings: SimSettings | None, overrides: dict[str, Any]) -> SimSettings:
    return dataclasses.replace(settings or SimSettings(), **overrides)


def _running(server: SimServer, host: str) -> RunningSim:
    port = server.sim.listener.port
    assert port is not None
    settings = server.sim.settings
    return RunningSim(f"http://{host}:{port}", port, settings.model_name, settings, server.app)


@contextlib.contextmanager
def serve_in_thread(
    settings: SimSettings | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout_s: float = 30.0,
    **overrides: Any,
) -> Iterator[RunningSim]:
    """Run saber-sim in a daemon thread with its own event loop, for tests and demos.

    ``overrides`` replace fields of ``settings`` (e.g. ``time_scale=10``). Port 0
    picks a free port; the yielded ``RunningSim`` says which. The server stops
    when the block exits.
    """
    server = make_server(_settings(settings, overrides), host=host, port=port)
    thread = run_in_thread(
        server,
        name=f"saber-sim on {host}:{port}",
        timeout=startup_timeout_s,
        ready=lambda: server.ready,
    )
    try:
        yield _running(server, host)
    finally:
        stop_thread(server, thread)


@contextlib.asynccontextmanager
async def serve(
    settings: SimSettings | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    **overrides: Any,
) -> AsyncIterator[RunningSim]:
    """Run saber-sim as a task in the running event loop (``async with serve() as sim``)."""
    server = make_server(_settings(settings, overrides), host=host, port=port)

    async def run() -> None:
        try:
            await server.serve()
        except SystemExit:  # uvicorn's way of saying it could not start
            raise RuntimeError(f"saber-sim failed to start on {host}:{port}") from None

    task = asyncio.create_task(run())
    while not server.ready:
        if task.done():
            task.result()
            raise RuntimeError(f"saber-sim failed to start on {host}:{port}")
        await asyncio.sleep(0.01)
    try:
        yield _running(server, host)
    finally:
        server.should_exit = True
        await task
