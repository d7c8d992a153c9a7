"""The headers a reverse proxy adds: who asked, over what, through whom.

As nginx's ``proxy_add_x_forwarded_for`` does, the client's address is appended to
``X-Forwarded-For`` (what the client sent stays in front of it, for the backend
to trust or not); ``X-Forwarded-Proto`` and ``X-Forwarded-Host`` are set to what
the gateway itself saw, and ``X-Real-IP`` (nginx's ``$remote_addr``, which backends
read as the client's one address) to the peer, whatever the client sent; a
``Forwarded`` element (RFC 7239) and a ``Via`` entry (RFC 9110, 7.6.3) are
appended. The gateway does not read these headers itself: the address in its logs
and these headers is the peer of its own socket (uvicorn's proxy-header rewriting
is off). ``Cookie`` never goes upstream (``upstream``).
"""

from __future__ import annotations

from starlette.types import Scope

from saber.gateway.upstream.client import Header

VIA_NAME = b"saber-gateway"
_REPLACED = frozenset(
    {
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-real-ip",
        b"forwarded",
        b"via",
    }
)


def headers(scope: Scope) -> list[Header]:
    """The client's headers (raw ASGI pairs) with this hop's forwarding headers."""
    client: list[Header] = scope["headers"]
    kept: list[Header] = []
    seen: dict[bytes, list[bytes]] = {}
    for name, value in client:
        if name in _REPLACED:
            seen.setdefault(name, []).append(value)
        else:
            kept.append((name, value))
    peer = scope.get("client")
    address = peer[0].encode() if peer else b"unknown"
    scheme = scope.get("scheme", "http").encode()
    host = next((v for k, v in client if k == b"host"), None)
    version = scope.get("http_version", "1.1").encode()

    kept.append((b"x-forwarded-for", _append(seen.get(b"x-forwarded-for"), address)))
    kept.append((b"x-real-ip", address))
    kept.append((b"x-forwarded-proto", scheme))
    if host is not None:
        kept.append((b"x-forwarded-host", host))
    element = b"for=" + _node(address) + b";proto=" + scheme
    if host is not None:
        element += b';host="' + host.replace(b"\\", b"").replace(b'"', b"") + b'"'
    kept.append((b"forwarded", _append(seen.get(b"forwarded"), element)))
    kept.append((b"via", _append(seen.get(b"via"), version + b" " + VIA_NAME)))
    return kept


def _append(earlier: list[bytes] | None, value: bytes) -> bytes:
    return b", ".join([*(earlier or []), value])


def _node(address: bytes) -> bytes:
    """RFC 7239's node: an IPv6 address is bracketed and quoted."""
    return b'"[' + address + b']"' if b":" in address else address
