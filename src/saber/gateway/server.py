"""Running the app on uvicorn: one worker, uvloop and httptools when installed.

``serve`` blocks (the CLI); ``start_in_thread`` runs a real server on its own
thread and event loop, on a free port when asked for port 0 (tests, the demo).

``GatewayServer`` is uvicorn's server with the gateway's signals: SIGTERM (and a
first SIGINT) starts the drain (``drain``) instead of closing connections under
running streams, and the server exits once it is over; a second SIGINT forces
the exit. SIGHUP reloads the config and the profile (``reload``). Its protocol
is uvicorn's own with a connection limit and a header deadline (``connections``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import gc
import logging
import resource
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import uvicorn

from saber._serving import bind, run_in_thread, stop_thread
from saber.gateway.app import GatewayApp, create_app
from saber.gateway.assembly import Gateway
from saber.gateway.connections import ConnectionGuard, GuardedProtocol
from saber.gateway.control.settings import GatewaySettings
from saber.gateway.observe.logs import GATEWAY_LOGGER

log = logging.getLogger(GATEWAY_LOGGER)

KEEPALIVE_S = 75
GRACEFUL_SHUTDOWN_S = 5
"""After the drain: how long uvicorn waits for what is left (requests to other
routes) before it cancels it."""
FD_MARGIN = 64
"""Descriptors beyond the client and backend connections: files, the loop, logs."""


def guard_for(app: GatewayApp) -> ConnectionGuard:
    """The connection limits of ``app``'s gateway, read from the settings in force."""
    gateway = app.gateway
    return ConnectionGuard(lambda: gateway.config, gateway.metrics)


def uvicorn_config(app: GatewayApp, guard: ConnectionGuard | None = None) -> uvicorn.Config:
    guard = guard or guard_for(app)
    return uvicorn.Config(
        app,
        loop="auto",  # uvloop when installed
        http=functools.partial(GuardedProtocol, guard=guard),  # type: ignore[arg-type]
        lifespan="on",
        access_log=False,  # the gateway writes its own line per request
        log_config=None,
        log_level="warning",
        timeout_keep_alive=KEEPALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        # The gateway appends the peer to X-Forwarded-For (forwarding); it does not
        # take a client's word for its own address.
        proxy_headers=False,
        backlog=2048,
    )


class GatewayServer(uvicorn.Server):
    """uvicorn's server, draining on SIGTERM and reloading on SIGHUP."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway) -> None:
        super().__init__(config)
        self.gateway = gateway
        self._reloads: set[asyncio.Task[bool]] = set()
        gateway.drain.on_done = self._drained

    def _drained(self) -> None:
        self.should_exit = True

    def begin_drain(self) -> None:
        """What SIGTERM does (also callable from the server's loop)."""
        if not self.started:
            self.should_exit = True  # not serving yet: nothing to drain
            return
        self.gateway.drain.begin()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._on_stop, signal.SIGTERM)
        loop.add_signal_handler(signal.SIGINT, self._on_stop, signal.SIGINT)
        loop.add_signal_handler(signal.SIGHUP, self._on_hup)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)

    def _on_stop(self, sig: int) -> None:
        if self.gateway.drain.draining or not self.started:
            if sig == signal.SIGINT:  # a second Ctrl-C: go now
                self.force_exit = True
            self.should_exit = True
            return
        log.warning("signal received: draining", extra={"signal": signal.Signals(sig).name})
        self.begin_drain()

    def _on_hup(self) -> None:
        if not self.started:
            return
        task = asyncio.get_running_loop().create_task(self.gateway.reload(trigger="SIGHUP"))
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)


def raise_fd_limit(needed: int) -> int | None:
    """Raise the soft limit on open files towards ``needed`` (up to the hard limit).
    Returns the soft limit if it stays below ``needed``, else None."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    return soft


def client_cap(nofile: int) -> int:
    """The most client connections an open-file limit below the settings' needs allows:
    half of what the margin leaves (the other half is the backend's), at least 8."""
    return max((nofile - FD_MARGIN) // 2, 8)


def serve(settings: GatewaySettings, sock: socket.socket | None = None) -> None:
    """Serve until SIGTERM or SIGINT (then drain), reloading on SIGHUP."""
    cfg = settings.config
    sock = sock or bind(cfg.host, cfg.port)
    upstream = sum(b.settings.max_connections for b in cfg.backend_list())
    nofile = raise_fd_limit(cfg.max_client_connections + upstream + FD_MARGIN)
    app = create_app(settings)
    guard = guard_for(app)
    if nofile is not None:
        guard.fd_cap = client_cap(nofile)
        log.warning(
            "the open-file limit is below what max_client_connections and "
            "backend.max_connections need: client connections are capped lower; raise "
            "ulimit -n (or lower the settings)",
            extra={"nofile": nofile, "client_connections": guard.fd_cap},
        )
    server = GatewayServer(uvicorn_config(app, guard), app.gateway)
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
    server: GatewayServer
    thread: threading.Thread

    @property
    def gateway(self) -> Gateway:
        return self.app.gateway

    def stop(self, timeout: float = 10.0) -> None:
        stop_thread(self.server, self.thread, timeout)

    def drain(self) -> None:
        """Begin the drain, as SIGTERM does (the thread ends once it is over)."""
        self._in_loop(self.server.begin_drain)

    def reload(self, settings: GatewaySettings | None = None, timeout: float = 10.0) -> bool:
        """Reload as SIGHUP does (or apply ``settings``); True if applied."""
        loop = self.gateway.admission._loop
        fut = asyncio.run_coroutine_threadsafe(self.gateway.reload(settings, trigger="call"), loop)
        return fut.result(timeout)

    def _in_loop(self, fn: Callable[[], None]) -> None:
        loop = self.gateway.admission._loop
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            try:
                fn()
                done.set_result(None)
            except BaseException as exc:  # pragma: no cover
                done.set_exception(exc)

        loop.call_soon_threadsafe(run)
        done.result(5)

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
    server = GatewayServer(uvicorn_config(app), app.gateway)
    thread = run_in_thread(server, name="saber-gateway", timeout=timeout, sockets=[sock])
    return RunningGateway(f"http://{host}:{bound_port}", app, server, thread)
