"""The ``Authorization: Bearer <key>`` header."""

from __future__ import annotations


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``{"authorization": "Bearer <key>"}``; none without a key."""
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def bearer_token(authorization: str) -> str | None:
    """The token of an ``Authorization`` header's value, None unless it is a Bearer one."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None
