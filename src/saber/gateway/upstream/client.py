"""The upstream client: the one shared connection pool to the backend, the requests
sent on it, the headers that cross it, and its failures as outcomes.

Requests only ever go to the configured backend: the URL is built from the
backend's base and a fixed path, never from anything the client sent.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable

import aiohttp
import httpx

from saber import wire
from saber.backend import describe_exc
from saber.config import BackendSettings
from saber.gateway.upstream.connect import TimedBackend, TimedConnector
from saber.scheduler import Outcome

Header = tuple[bytes, bytes]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Also never forwarded upstream: what the gateway sets itself or keeps to itself
# (no accept-encoding: the backend answers uncompressed, so chunks pass as they are;
# no cookie: the client's session with whatever sits in front is not the backend's).
_NOT_UPSTREAM = HOP_BY_HOP | {
    b"host",
    b"content-length",
    b"authorization",
    b"accept-encoding",
    b"expect",
    b"cookie",
}
# Also never passed back: what the gateway's own server sets itself.
_NOT_DOWNSTREAM = HOP_BY_HOP | {b"content-length", b"content-encoding", b"date", b"server"}


def _connection_listed(headers: Iterable[Header]) -> set[bytes]:
    """Headers named in a Connection header are hop-by-hop too (RFC 9110, 7.6.1)."""
    return {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }


def upstream_headers(client: list[Header], api_key: str | None) -> list[Header]:
    """The client's headers (raw ASGI pairs, names in lower case) fit to go upstream."""
    drop = _NOT_UPSTREAM | _connection_listed(client)
    out = [(k, v) for k, v in client if k not in drop and not k.startswith(b"x-saber-")]
    if not any(k == b"content-type" for k, _ in out):
        out.append((b"content-type", b"application/json"))
    out.extend((k.encode(), v.encode()) for k, v in wire.auth_headers(api_key).items())
    return out


def downstream_headers(upstream: httpx.Headers) -> list[Header]:
    pairs = [(k.lower(), v) for k, v in upstream.raw]
    drop = _NOT_DOWNSTREAM | _connection_listed(pairs)
    return [(k, v) for k, v in pairs if k not in drop]


class BackendFailure(Exception):
    """The backend could not be reached, or broke off; ``outcome`` says how."""

    def __init__(self, outcome: Outcome, kind: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.kind = kind  # the saber_backend_errors_total label
        self.message = message


def classify(exc: httpx.HTTPError, *, streaming: bool) -> BackendFailure:
    """Map an httpx error to an outcome: refused or reset is 503, silence is 504.

    ``streaming`` says the response had begun, so any error breaks the stream
    (httpx-aiohttp reports a server disconnect as a connect timeout).
    """
    if streaming:
        if isinstance(exc, httpx.ReadTimeout):
            return BackendFailure(
                Outcome.BACKEND_TIMEOUT, "stream_timeout", "the backend stopped sending"
            )
        return BackendFailure(
            Outcome.BACKEND_ERROR,
            "stream_broken",
            f"the backend broke off the stream ({describe_exc(exc)})",
        )
    if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError | httpx.PoolTimeout):
        return BackendFailure(
            Outcome.BACKEND_UNAVAILABLE,
            "connect",
            f"the backend is unreachable ({describe_exc(exc)})",
        )
    if isinstance(exc, httpx.TimeoutException):
        return BackendFailure(
            Outcome.BACKEND_TIMEOUT,
            "timeout",
            f"the backend did not answer in time ({describe_exc(exc)})",
        )
    return BackendFailure(
        Outcome.BACKEND_UNAVAILABLE,
        "reset",
        f"the backend closed the connection ({describe_exc(exc)})",
    )


def _dropped_connection(exc: httpx.HTTPError) -> bool:
    """The connection broke before an answer, after it had been made: a reused one the
    server had closed, or a new one that a full listen queue let the client believe
    open and then reset (aiohttp's disconnect or failed write; httpx's own errors)."""
    if isinstance(exc, httpx.RemoteProtocolError | httpx.WriteError | httpx.ReadError):
        return True
    cause = exc.__cause__
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return True
    return isinstance(cause, aiohttp.ClientOSError) and not isinstance(
        cause, aiohttp.ClientConnectorError
    )


KEEPALIVE_EXPIRY_S = 4.0
RESENDS = 3


def make_client(
    settings: BackendSettings, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """The shared client: keep-alive, a pool as large as the configured limit, new
    connections within the connect timeout (``connect.within``, which a late loop
    cannot trip), and a long read timeout (the longest silence)."""
    limits = httpx.Limits(
        max_connections=settings.max_connections,
        max_keepalive_connections=settings.max_connections,
        # Below uvicorn's (and so vLLM's) 5 s keep-alive timeout, so that the client
        # drops an idle connection before the server does, never reusing a dead one.
        keepalive_expiry=KEEPALIVE_EXPIRY_S,
    )
    timeout = httpx.Timeout(
        connect=None,  # connect.within's (connect_timeout_s)
        read=settings.read_timeout_s,
        write=settings.read_timeout_s,
        pool=settings.read_timeout_s,
    )
    if transport is not None:  # tests
        return httpx.AsyncClient(transport=transport, timeout=timeout, trust_env=False)
    connect_s = settings.connect_timeout_s
    if settings.transport == "aiohttp":
        from httpx_aiohttp import AiohttpTransport

        def session() -> aiohttp.ClientSession:
            connector = TimedConnector(
                connect_s, limit=settings.max_connections, keepalive_timeout=KEEPALIVE_EXPIRY_S
            )
            return aiohttp.ClientSession(connector=connector)

        return httpx.AsyncClient(
            transport=AiohttpTransport(client=session), timeout=timeout, trust_env=False
        )
    pooled = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
    pool = pooled._pool
    pool._network_backend = TimedBackend(connect_s, pool._network_backend)
    return httpx.AsyncClient(transport=pooled, timeout=timeout, trust_env=False)


class Upstream:
    """The backend, as the relay sees it."""

    def __init__(self, settings: BackendSettings, client: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self.base = settings.url
        self.client = client or make_client(settings)
        self._urls: dict[str, httpx.URL] = {}
        self._timeout = self.client.timeout.as_dict()

    def request(self, path: str, body: bytes, headers: list[Header]) -> httpx.Request:
        """A POST to ``path`` on the backend, built directly: the per-request work
        of ``client.build_request`` (URL parsing, header merging) is not needed."""
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self.base + path)
        return httpx.Request(
            "POST",
            url,
            headers=upstream_headers(headers, self.settings.api_key),
            content=body,
            extensions={"timeout": self._timeout},
        )

    @contextlib.asynccontextmanager
    async def open(self, request: httpx.Request) -> AsyncIterator[httpx.Response]:
        """Send, and give the response as soon as its status and headers are in; it is
        closed when the block exits, which makes the backend abort what it still
        generates. BackendFailure if no answer comes.

        A kept-alive connection that the backend has already dropped fails before any
        answer; the request is sent again, up to RESENDS times, as the pool may hold
        more dead ones. llama-server drops them without notice when its HTTP threads
        are all taken (its extra threads serve one request each), and no engine starts
        work on a request whose connection is gone.
        """
        response = await self._send(request)
        try:
            yield response
        finally:
            await response.aclose()

    async def _send(self, request: httpx.Request) -> httpx.Response:
        for attempt in range(RESENDS + 1):
            try:
                return await self.client.send(request, stream=True)
            except httpx.HTTPError as exc:
                if attempt == RESENDS or not _dropped_connection(exc):
                    raise classify(exc, streaming=False) from exc
        raise AssertionError("unreachable")

    async def get_json(self, path: str, timeout: float | None = None) -> tuple[int, object]:
        """A small GET (models, health) with the backend's key."""
        try:
            resp = await self.client.get(
                self.base + path,
                headers=wire.auth_headers(self.settings.api_key),
                timeout=timeout or self.settings.connect_timeout_s,
            )
        except httpx.HTTPError as exc:
            raise classify(exc, streaming=False) from exc
        try:
            return resp.status_code, resp.json()
        except ValueError:
            return resp.status_code, None

    async def aclose(self) -> None:
        await self.client.aclose()
