"""A request's session, for affinity over several backends (``cluster.affinity_margin``).

A session is an editor session (the ``cluster.affinity_header``) of one caller (the API
key's configured name; without configured keys, the bearer token itself). The
scheduler gets a digest of the two, so that no secret is kept or logged. A request
without the header has no session and is placed on its merits alone: a key names a
team, and pinning a whole team (or every client sending the same placeholder token)
to one backend would trade its spread for a cache that few of its requests share.
"""

from __future__ import annotations

import hashlib

from starlette.types import Scope

from saber import wire
from saber.gateway.edge.access import Key


def session_key(scope: Scope, key: Key | None, header: str) -> str | None:
    """The stable key of the request's session (a hex digest), or None without the
    session header."""
    wanted = header.lower().encode("latin-1")
    token = session = None
    for name, value in scope["headers"]:
        if name == b"authorization" and key is None:
            token = wire.bearer_token(value.decode("latin-1")) or None
        elif name == wanted:
            session = value.decode("latin-1").strip() or None
    if session is None:
        return None
    who = f"key:{key.name}" if key is not None else f"token:{token}" if token else ""
    raw = f"{who}\x00{session}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]
