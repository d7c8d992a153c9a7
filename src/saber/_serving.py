"""A uvicorn server on a thread of its own: the gateway's and saber-sim's, in tests,
the demo, and anything that embeds them."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable

import uvicorn


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; OSError (address in use, ...) comes out here, before start-up."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def run_in_thread(
    server: uvicorn.Server,
    *,
    name: str,
    timeout: float,
    sockets: list[socket.socket] | None = None,
    ready: Callable[[], bool] | None = None,
) -> threading.Thread:
    """Run ``server`` on a daemon thread with its own event loop; return once
    ``ready()`` (by default: uvicorn has started). RuntimeError naming ``name`` if the
    server gives up first (a port in use), TimeoutError after ``timeout`` seconds,
    when the server is told to exit."""

    def run() -> None:
        with contextlib.suppress(SystemExit):  # uvicorn's way of saying it could not start
            server.run(sockets=sockets)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    is_ready = ready or (lambda: server.started)
    deadline = time.monotonic() + timeout
    while not is_ready():
        if not thread.is_alive():
            raise RuntimeError(f"{name} failed to start")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise TimeoutError(f"{name} did not start in {timeout:g} s")
        time.sleep(0.01)
    return thread


def stop_thread(server: uvicorn.Server, thread: threading.Thread, timeout: float = 10.0) -> None:
    """Ask the server to exit and wait for its thread (at most ``timeout`` seconds)."""
    server.should_exit = True
    thread.join(timeout)


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task and wait until it has ended (its cancellation swallowed)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
