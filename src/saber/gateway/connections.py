"""Client connections: how many may be open, and how long a request's headers may take.

uvicorn has neither a deadline for headers nor a limit on connections that refuses
cleanly: a client that sends its headers a byte a second (or nothing at all)
holds a connection, and a file descriptor, for ever, and past the process's file
limit new clients are reset. ``GuardedProtocol`` is uvicorn's own HTTP protocol
(httptools, else h11) with two additions:

- a connection over ``max_client_connections`` is answered at once with a 503
  (an OpenAI error body, ``Retry-After: 1``, ``Connection: close``); its write side
  is shut, what the client sends meanwhile is read and dropped, and it is closed
  after ``LINGER_S``, so the client reads the answer instead of a reset;
- a request whose headers have not all arrived ``header_timeout_s`` after the
  connection opened, or after the first byte of a request on a kept-alive one, is
  answered 408 and the connection closed. An idle kept-alive connection is
  uvicorn's own keep-alive timeout's (75 s).

Both read the settings in force at each connection (a reload applies) and are
counted in ``saber_connections_refused_total``. The body's own deadline,
``body_timeout_s``, is the route's (``payload.read_body``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from saber import wire
from saber.config import GatewayConfig
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.gateway.observe.metrics import GatewayMetrics

log = logging.getLogger(GATEWAY_LOGGER)

LINGER_S = 1.0
"""How long a refused connection stays open for its answer to be read."""


def _canned(status: int, reason: str, message: str, code: str, extra: str = "") -> bytes:
    body = json.dumps(wire.error_body(message, status, code=code)).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        f"{extra}"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


class ConnectionGuard:
    """The settings and counters the protocols of one server share."""

    def __init__(self, config: Callable[[], GatewayConfig], metrics: GatewayMetrics) -> None:
        self._config = config  # the settings in force (a reload swaps them)
        self._metrics = metrics
        self.open = 0
        self.fd_cap: int | None = None  # set when the open-file limit allows fewer
        self._refused_logged = False
        metrics.watch_connections(lambda: self.open)

    @property
    def limit(self) -> int:
        limit = self._config().max_client_connections
        return limit if self.fd_cap is None else min(limit, self.fd_cap)

    @property
    def header_timeout_s(self) -> float:
        return self._config().header_timeout_s

    def refused(self, reason: str) -> None:
        self._metrics.connections_refused.labels(reason).inc()
        if reason == "limit" and not self._refused_logged:
            self._refused_logged = True  # once per burst: a flood must not flood the log
            log.warning(
                "refusing client connections: max_client_connections reached",
                extra={"max_client_connections": self.limit},
            )

    def accepted(self) -> None:
        self.open += 1
        if self.open < self.limit:
            self._refused_logged = False

    def closed(self) -> None:
        self.open -= 1


class GuardedProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """uvicorn's HTTP protocol with a connection limit and a header deadline."""

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard = guard
        self._refused = False
        self._counted = False
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for: object = None  # the request cycle current when the timer was set

    # -- the limit ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override,unused-ignore]
        guard = self._guard
        if len(self.connections) >= guard.limit:
            self._refuse(transport)
            return
        super().connection_made(transport)
        self._counted = True
        guard.accepted()
        self._arm()

    def _refuse(self, transport: asyncio.Transport) -> None:
        self._refused = True
        self._guard.refused("limit")
        transport.write(
            _canned(
                503,
                "Service Unavailable",
                "the gateway has too many open connections; retry",
                "too_many_connections",
                "retry-after: 1\r\n",
            )
        )
        if transport.can_write_eof():
            transport.write_eof()
        self._timer = self.loop.call_later(LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # read and dropped: closing with unread data would reset the connection
        idle = self._awaiting_headers()  # then these bytes begin a request
        super().data_received(data)
        if idle and self._awaiting_headers() and self._armed_for is not self.cycle:
            self._arm()  # its headers are not all in: from now, header_timeout_s

    def eof_received(self) -> bool | None:
        if self._refused:
            return None  # both sides done: close
        return super().eof_received()  # type: ignore[no-any-return]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._refused:
            return
        if self._counted:
            self._counted = False
            self._guard.closed()
        super().connection_lost(exc)

    # -- the header deadline ----------------------------------------------------------

    def _awaiting_headers(self) -> bool:
        """No request is under way: the next one's headers are still to come."""
        cycle = self.cycle
        return cycle is None or cycle.response_complete

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for = self.cycle
        self._timer = self.loop.call_later(self._guard.header_timeout_s, self._deadline)

    def _deadline(self) -> None:
        self._timer = None
        transport = self.transport
        if transport is None or transport.is_closing() or not self._awaiting_headers():
            return
        if self.cycle is not self._armed_for:  # its headers came: that request began
            self._armed_for = None
            return
        self._guard.refused("header_timeout")
        transport.write(
            _canned(
                408,
                "Request Timeout",
                f"the request's headers did not arrive within {self._guard.header_timeout_s:g} s",
                "request_timeout",
            )
        )
        transport.close()
