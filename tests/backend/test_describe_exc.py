"""A failed request to a backend, in words: a refused connection says so, whichever
client made it; an error httpx-aiohttp translated is named by aiohttp's own."""

from __future__ import annotations

import aiohttp
import httpx

from saber.backend import describe_exc, refused


def translated(original: BaseException, as_: type[httpx.HTTPError]) -> httpx.HTTPError:
    """What httpx-aiohttp raises: an httpx error ``from`` aiohttp's."""
    try:
        raise as_(str(original)) from original
    except httpx.HTTPError as exc:
        return exc


def test_a_refused_connection_says_so() -> None:
    key = aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None)
    os_error = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
    aiohttp_refused = translated(aiohttp.ClientConnectorError(key, os_error), httpx.ConnectTimeout)
    group = OSError("All connection attempts failed")
    group.__cause__ = ExceptionGroup("attempts", [ConnectionRefusedError(111, "refused")])
    httpx_refused = translated(group, httpx.ConnectError)
    for exc in (aiohttp_refused, httpx_refused):
        assert refused(exc) and describe_exc(exc) == "connection refused"


def test_other_failures_keep_their_names() -> None:
    disconnected = translated(aiohttp.ServerDisconnectedError(), httpx.ConnectTimeout)
    assert not refused(disconnected)
    assert describe_exc(disconnected) == "ServerDisconnectedError: Server disconnected"
    assert describe_exc(httpx.ConnectTimeout("timed out")) == "ConnectTimeout: timed out"
    assert describe_exc(httpx.ReadError("")) == "ReadError"
