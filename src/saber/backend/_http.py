"""Small GETs against a backend, with errors that name the URL."""

from __future__ import annotations

from typing import Any

import httpx

from saber import wire
from saber.backend._kind import BackendError


def describe_exc(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def get(client: httpx.AsyncClient, url: str) -> httpx.Response:
    """GET ``url``; a BackendError if the backend cannot be reached or breaks off."""
    try:
        return await client.get(url)
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
