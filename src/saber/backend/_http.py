"""Small GETs against a backend, with errors that name the URL."""

from __future__ import annotations

from typing import Any

import httpx

from saber import wire
from saber.backend._kind import BackendError


def describe_exc(exc: BaseException) -> str:
    """What went wrong with a request to a backend, in words: ``connection refused``
    when it was (whatever the client calls it: httpx's ``ConnectError: All connection
    attempts failed``, httpx-aiohttp's ``ConnectTimeout``), else the error's type and
    text, named by aiohttp's own error where httpx-aiohttp translated one (it reports
    any failure to connect, and a server's disconnect, as a ``ConnectTimeout``)."""
    if refused(exc):
        return "connection refused"
    cause = exc.__cause__
    if cause is not None and type(cause).__module__.startswith("aiohttp"):
        exc = cause
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def refused(exc: BaseException) -> bool:
    """The backend refused the connection: a ConnectionRefusedError somewhere in the
    error's causes (aiohttp keeps it as ``os_error``; anyio in an exception group)."""
    seen: set[int] = set()
    stack: list[object] = [exc]
    while stack:
        err = stack.pop()
        if not isinstance(err, BaseException) or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, ConnectionRefusedError):
            return True
        stack += [err.__cause__, err.__context__, getattr(err, "os_error", None)]
        stack += getattr(err, "exceptions", None) or ()
    return False


async def get(
    client: httpx.AsyncClient, url: str, timeout_s: float | None = None
) -> httpx.Response:
    """GET ``url`` (within ``timeout_s``, else the client's timeout); a BackendError if
    the backend cannot be reached, breaks off or does not answer in time."""
    timeout = httpx.USE_CLIENT_DEFAULT if timeout_s is None else httpx.Timeout(timeout_s)
    try:
        return await client.get(url, timeout=timeout)
    except httpx.HTTPError as exc:
        raise BackendError(f"cannot reach {url}: {describe_exc(exc)}") from exc


def json_body(resp: httpx.Response) -> Any:
    """The parsed JSON body of a 200 answer, else None (absent, an error, not JSON)."""
    if resp.status_code != 200:
        return None
    try:
        return resp.json()
    except (ValueError, UnicodeDecodeError):
        return None


def error_detail(resp: httpx.Response) -> str:
    """What a failed answer says: the OpenAI-style error message, else the start of the body."""
    return wire.error_message(resp.content)
