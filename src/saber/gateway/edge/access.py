"""Who may call the gateway: client keys, the key that may read /metrics, open routes.

With ``api_keys`` set, every route but liveness and readiness needs
``Authorization: Bearer <key>``. ``/metrics`` takes a client key or one of
``metrics_keys`` (a scraper's bearer token), or none with ``metrics_public``; with
no key configured at all, everything is open. A token is compared with every
configured key, in constant time for each and without stopping at a match, on
SHA-256 digests (so that keys of any length compare alike).

A key may be limited to some task types (``tasks``): a request that names another
by header or model alias is refused (403); one that names none gets the key's
``default_task`` (else its first task) where the rules or the default would have
picked one it may not use. A key may also cap ``max_tokens`` (``honesty``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.responses import Response
from starlette.types import Scope

from saber import wire
from saber.config import GatewayConfig, SloBounds, TaskType
from saber.gateway.edge.tasks import Via
from saber.gateway.errors import GatewayError
from saber.scheduler import Outcome

PUBLIC_PATHS = frozenset({"/health/live", "/health/ready"})
METRICS_PATH = "/metrics"
CHOSEN_BY_CLIENT: frozenset[Via] = frozenset({"header", "alias"})


@dataclass(frozen=True, slots=True)
class Key:
    """A client key as the gateway keeps it: its name (the only thing shown anywhere),
    the digest of its secret, and what it may do."""

    name: str
    digest: bytes
    tasks: frozenset[str]
    """The task types it may use; empty: all."""
    default_task: str | None
    max_tokens: int | None
    slo_bounds: SloBounds | None = None
    """What its requests may state of their own SLO, in place of their task's bounds."""

    def task_for(self, task: TaskType, via: Via, tasks: dict[str, TaskType]) -> TaskType:
        """The task a request of this key runs as: ``task`` if the key may use it; the
        key's default if the gateway picked ``task``; a 403 if the client named it."""
        if not self.tasks or task.name in self.tasks:
            return task
        if via in CHOSEN_BY_CLIENT:
            raise GatewayError(
                Outcome.FORBIDDEN,
                f"this API key may not use task type {task.name}; "
                f"allowed: {', '.join(sorted(self.tasks))}",
                code="task_not_allowed",
                param="X-Saber-Task" if via == "header" else "model",
            )
        return tasks[self.default_task or min(self.tasks)]


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _match(token: str | None, keys: Iterable[tuple[bytes, Key | None]]) -> tuple[bool, Key | None]:
    """Compare ``token`` with every key (constant time each, no early exit)."""
    if token is None:
        return False, None
    digest = _digest(token)
    found, key = False, None
    for candidate, who in keys:
        if hmac.compare_digest(candidate, digest):
            found, key = True, who
    return found, key


def _authorization(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return wire.bearer_token(value.decode("latin-1"))
    return None


class Access:
    """The keys in force (rebuilt on reload)."""

    def __init__(self, config: GatewayConfig) -> None:
        self.keys = [
            Key(
                name=k.name or "",
                digest=_digest(k.key.get_secret_value()),
                tasks=frozenset(k.tasks),
                default_task=k.default_task,
                max_tokens=k.max_tokens,
                slo_bounds=k.slo_bounds,
            )
            for k in config.client_keys()
        ]
        self._clients = [(k.digest, k) for k in self.keys]
        self._scrapers = [(_digest(k), None) for k in config.metrics_keys]
        self.metrics_public = config.metrics_public

    def client(self, scope: Scope) -> Key | None:
        """The key a request carries (None when no keys are configured); a 401
        GatewayError when keys are configured and it carries none of them."""
        if not self.keys:
            return None
        found, key = _match(_authorization(scope), self._clients)
        if not found:
            raise unauthorized()
        return key

    def route(self, scope: Scope) -> Response | None:
        """None if ``scope`` may go on to a route other than the completions; else the 401."""
        path = scope.get("path", "")
        if path in PUBLIC_PATHS:
            return None
        if path == METRICS_PATH:
            if self.metrics_public or not (self.keys or self._scrapers):
                return None
            found, _ = _match(_authorization(scope), [*self._clients, *self._scrapers])
        else:
            if not self.keys:
                return None
            found, _ = _match(_authorization(scope), self._clients)
        return None if found else unauthorized().response()


def unauthorized() -> GatewayError:
    return GatewayError(
        Outcome.UNAUTHORIZED,
        "missing or invalid API key: send 'Authorization: Bearer <key>'",
        code="invalid_api_key",
        headers={"www-authenticate": "Bearer"},
    )
