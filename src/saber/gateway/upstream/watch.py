"""What the gateway knows of its backend besides the requests it relays.

Which engine it is (configured, or detected at start-up and retried in the
background while the backend is down; vLLM is assumed meanwhile), its version,
whether the admission tier goes to it as the request priority (``priority``:
settled once it is identified), and its own count of running and waiting requests,
read from its ``/metrics`` every ``backend.metrics_interval_s``. That count includes
traffic that does not pass through the gateway, which the scheduler cannot see. A
backend that answers again after nothing listened is identified and asked again: a
restarted engine may run another version or scheduling policy.

These requests go through a small client of their own, so that they never wait
behind relayed streams for a connection, and a bad answer is counted and
logged, never raised: the watch must not take the gateway down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Literal

import httpx

from saber import wire
from saber.backend import (
    BackendError,
    BackendInfo,
    BackendKind,
    BackendLoad,
    fetch_load,
    refused,
)
from saber.backend import describe as describe_backend
from saber.config import BackendSettings
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.gateway.upstream.client import KEEPALIVE_EXPIRY_S
from saber.gateway.upstream.dialect import DIALECTS, Dialect
from saber.gateway.upstream.priority import EnginePriority

log = logging.getLogger(GATEWAY_LOGGER)

KindSource = Literal["configured", "detected", "assumed"]

FIRST_IDENTIFY_S = 5.0
"""Start-up waits at most this long for the backend to say what it is."""
PROBE_TIMEOUT_S = 5.0
RETRY_MIN_S = 1.0
RETRY_MAX_S = 15.0
SCRAPE_TIMEOUT_MIN_S = 1.0
SCRAPE_TIMEOUT_MAX_S = 5.0
STALE_AFTER_MIN_S = 5.0
STALE_INTERVALS = 3


def control_client(
    settings: BackendSettings, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """A client for the backend's /version, /v1/models, /props, /server_info and /metrics."""
    headers = wire.auth_headers(settings.api_key)
    # Per request; a scrape as a whole is bounded tighter by BackendWatch.scrape_timeout.
    timeout = httpx.Timeout(PROBE_TIMEOUT_S, connect=settings.connect_timeout_s)
    if transport is not None:  # tests: the same fake backend as the relay's
        return httpx.AsyncClient(
            transport=transport, headers=headers, timeout=timeout, trust_env=False
        )
    limits = httpx.Limits(
        max_connections=2, max_keepalive_connections=2, keepalive_expiry=KEEPALIVE_EXPIRY_S
    )
    return httpx.AsyncClient(headers=headers, timeout=timeout, limits=limits, trust_env=False)


class BackendWatch:
    """The backend's identity and load, kept up to date by background tasks."""

    def __init__(
        self, settings: BackendSettings, on_scrape: Callable[[], None] | None = None
    ) -> None:
        self.url = settings.url
        self.on_scrape = on_scrape  # after each read of /metrics, good or not
        self.refused = False  # the last read found nothing listening: the backend is down
        configured = None if settings.kind == "auto" else BackendKind(settings.kind)
        self.configured_kind = configured
        self.kind: BackendKind = configured or BackendKind.VLLM
        self.kind_source: KindSource = "configured" if configured else "assumed"
        self.version: str | None = None
        self.models: list[str] = []
        self.identified = False
        self.priority = EnginePriority(settings)  # whether the tier goes as its priority
        self.interval: float = settings.metrics_interval_s or 0.0
        self.scrape_timeout = min(max(self.interval, SCRAPE_TIMEOUT_MIN_S), SCRAPE_TIMEOUT_MAX_S)
        self.stale_after = max(STALE_INTERVALS * self.interval, STALE_AFTER_MIN_S)
        self.load: BackendLoad | None = None
        # The engine's mean time to first token between the last two reads; None when
        # the last read failed or nothing made a first token in between.
        self.ttft_s: float | None = None
        self.scraped_at: float | None = None  # time.monotonic() of the last good scrape
        self.scrape_errors = 0
        self.last_error: str | None = None
        self._client: httpx.AsyncClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._ask_again = False  # nothing listened after it was identified

    @property
    def dialect(self) -> Dialect:
        return DIALECTS[self.kind]

    # -- lifecycle --------------------------------------------------------------------

    async def start(self, client: httpx.AsyncClient) -> None:
        """Identify the backend (briefly), then keep watching it in the background."""
        self._client = client
        try:
            async with asyncio.timeout(FIRST_IDENTIFY_S):
                known = await self._identify(quiet=False)
        except TimeoutError:
            self._not_yet(f"no answer within {FIRST_IDENTIFY_S:g} s", quiet=False)
            known = False
        if known:
            await self._decide_priority()
        else:
            self._spawn(self._identify_until_known(), "saber-backend-identify")
        if self.interval > 0:
            self._spawn(self._poll(), "saber-backend-metrics")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._client is not None:
            await self._client.aclose()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks = [t for t in self._tasks if not t.done()]
        self._tasks.append(asyncio.create_task(coro, name=name))

    # -- identity ---------------------------------------------------------------------

    async def _identify(self, *, quiet: bool) -> bool:
        assert self._client is not None
        try:
            info = await describe_backend(self._client, self.url, self.configured_kind)
        except BackendError as exc:
            self._not_yet(str(exc), quiet=quiet)
            return False
        except Exception as exc:  # a broken answer must not stop the gateway
            self._not_yet(f"{type(exc).__name__}: {exc}", quiet=quiet)
            return False
        self._identified(info)
        return True

    async def _identify_until_known(self) -> None:
        delay = RETRY_MIN_S
        while True:
            await asyncio.sleep(delay)
            if await self._identify(quiet=True):
                await self._decide_priority()
                return
            delay = min(delay * 2, RETRY_MAX_S)

    async def _identify_again(self) -> None:
        if await self._identify(quiet=True):
            await self._decide_priority()
        else:
            await self._identify_until_known()

    async def _decide_priority(self) -> None:
        """Once identified, outside the start-up's short wait for the identity: vLLM's
        first /server_info takes seconds (``priority.POLICY_TIMEOUT_S``)."""
        assert self._client is not None
        await self.priority.decide(self._client, self.url, self.kind)

    def _identified(self, info: BackendInfo) -> None:
        self.kind = info.kind
        self.version = info.version
        self.models = list(info.models)
        self.identified = True
        if self.configured_kind is None:
            self.kind_source = "detected"
        log.info(
            "backend identified",
            extra={
                "backend": self.url,
                "backend_kind": self.kind.value,
                "kind_source": self.kind_source,
                "backend_version": self.version,
                "backend_models": self.models,
            },
        )

    def _not_yet(self, reason: str, *, quiet: bool) -> None:
        what = "identify" if self.configured_kind is None else "describe"
        (log.debug if quiet else log.warning)(
            f"cannot {what} the backend yet; serving it as {self.kind.value} and retrying "
            "in the background",
            extra={"backend": self.url, "error": reason},
        )

    # -- load ---------------------------------------------------------------------------

    async def _poll(self) -> None:
        while True:
            started = time.monotonic()
            await self.scrape()
            if self.on_scrape is not None:
                try:
                    self.on_scrape()
                except Exception:  # the watch must not stop
                    log.exception(
                        "acting on the backend's load failed", extra={"backend": self.url}
                    )
            await asyncio.sleep(max(self.interval - (time.monotonic() - started), 0.0))

    async def scrape(self) -> bool:
        """Read the backend's load once; False (and one more error counted) if it failed."""
        assert self._client is not None
        try:
            # Not asyncio.wait_for: on Python 3.11 it drops a cancellation that lands as
            # the read ends, and this loop then outlived the gateway's shutdown.
            async with asyncio.timeout(self.scrape_timeout):
                load = await fetch_load(self._client, self.url, self.kind)
        except Exception as exc:  # whatever the backend answers, the loop goes on
            if isinstance(exc, TimeoutError):
                reason = f"GET {self.url}/metrics: no answer within {self.scrape_timeout:g} s"
            else:
                reason = str(exc) or type(exc).__name__
            self.scrape_errors += 1
            self.ttft_s = None
            self.refused = refused(exc) or isinstance(exc.__cause__, httpx.ConnectError)
            # Gone after it was identified: ask again what it is once it is back.
            self._ask_again = self._ask_again or (self.refused and self.identified)
            if self.last_error is None:
                log.warning(
                    "cannot read the backend's load", extra={"backend": self.url, "error": reason}
                )
            self.last_error = reason
            return False
        if self.last_error is not None:
            log.info("reading the backend's load again", extra={"backend": self.url})
        if self._ask_again:  # perhaps restarted as another version, engine or policy
            self._ask_again = False
            self._spawn(self._identify_again(), "saber-backend-identify")
        self.last_error = None
        self.refused = False
        self.ttft_s = load.ttft_since(self.load)
        self.load = load
        self.scraped_at = time.monotonic()
        return True

    def scraped_age_s(self) -> float | None:
        return None if self.scraped_at is None else time.monotonic() - self.scraped_at

    def fresh_load(self) -> BackendLoad | None:
        """The last load read, unless it is older than ``stale_after`` seconds."""
        age = self.scraped_age_s()
        return self.load if age is not None and age <= self.stale_after else None
