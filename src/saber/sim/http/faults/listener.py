"""Refusing connections for a while, the way a restarting vLLM does.

Refusing closes the listening sockets, so a connect gets ``ECONNREFUSED``, and
asks every open connection to close once its current response is done, so a
client's idle keep-alive connections go too; requests already in flight finish.
After the given time the same address is bound again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import uvicorn

log = logging.getLogger("saber.sim.http")

_REOPENING = 0.001
"""Seconds reported left between the planned end of a refusal and the reopened socket."""


class ListenerControl:
    """Closes and reopens a running uvicorn server's listening sockets."""

    def __init__(self) -> None:
        self._server: uvicorn.Server | None = None
        self._host = "127.0.0.1"
        self.port: int | None = None
        self._reopen: asyncio.TimerHandle | None = None
        self._until: float | None = None

    @property
    def attached(self) -> bool:
        return self._server is not None

    @property
    def refusing_for(self) -> float:
        """Seconds of refusal left; 0 only once the socket listens again. Past the
        planned end, while the socket is still being reopened, a moment is left: a
        client that waits for 0 must not connect before the listener is back."""
        if self._until is None:
            return 0.0
        return max(_REOPENING, self._until - time.monotonic())

    def attach(self, server: uvicorn.Server) -> None:
        """Call once the server listens (from its event loop)."""
        self._server = server
        sock = server.servers[0].sockets[0]
        self._host = server.config.host or "0.0.0.0"
        self.port = sock.getsockname()[1]

    def refuse(self, seconds: float) -> None:
        """Stop accepting now and start again ``seconds`` later (a later call wins)."""
        server = self._server
        if server is None:
            raise RuntimeError("refusing connections needs a server started by saber-sim")
        for s in server.servers:
            s.close()
        server.servers = []
        for conn in list(server.server_state.connections):
            conn.shutdown()
        if self._reopen is not None:
            self._reopen.cancel()
        loop = asyncio.get_running_loop()
        self._until = time.monotonic() + seconds
        self._reopen = loop.call_later(seconds, lambda: loop.create_task(self._listen()))
        log.warning("refusing connections for %.3g s", seconds)

    async def _listen(self) -> None:
        server = self._server
        assert server is not None
        self._reopen = None
        config = server.config

        def protocol(_loop: asyncio.AbstractEventLoop | None = None) -> Any:
            # What uvicorn's own startup builds for each connection.
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=server.server_state,
                app_state=server.lifespan.state,
                _loop=_loop,
            )

        loop = asyncio.get_running_loop()
        for attempt in range(50):
            try:
                listener = await loop.create_server(
                    protocol, host=self._host, port=self.port, backlog=config.backlog
                )
                break
            except OSError as exc:  # the port is briefly busy; try again
                if attempt == 49:
                    log.error("could not listen on port %s again: %s", self.port, exc)
                    return
                await asyncio.sleep(0.1)
        server.servers = [listener]
        self._until = None
        log.warning("accepting connections again on port %s", self.port)
