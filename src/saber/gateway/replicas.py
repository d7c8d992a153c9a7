"""The backends one gateway serves, each with its own speed model, load, health and
learning, and what ties them to the admission pool.

Each backend (``Replica``) has a scheduler in the pool (``saber.scheduler.Pool``:
placement by the chance of meeting the deadline), a client, a watch on its
``/metrics``, a circuit breaker and its own closed loop (calibration, refits). The pool
learns two things from here:

- **out of service**: a backend that fails ``eject_after`` requests (or reads of its
  ``/metrics`` that find nothing listening) in a row is ejected (``Pool.set_down``):
  nothing new goes there and what waits there moves on.
  After ``eject_s`` one ``GET /health`` decides whether it serves again; with one
  backend there is nowhere else to go, and it is never ejected;
- **other gateways** (``cluster.gateways`` > 1, no shared store): after each read of
  a backend's ``/metrics`` its running and waiting sequences, less this gateway's own
  there, are others'; the headroom stands for what they admit until the next read
  (``cluster.headroom``, or derived from what this gateway admitted there over the
  last interval). A fixed headroom is kept from the start and is also a bound: this
  gateway admits at most ``budget_of(headroom, gateways)`` sequences at a backend in
  any interval, so the others' admissions it has not seen never pass the headroom.
  A stale read (``BackendWatch.fresh_load``) counts as unknown: ``cluster.stale``
  says whether the backend then takes new requests (open: on this gateway's own
  count and the headroom) or not (closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
from collections.abc import Callable, Iterator, Sequence

import httpx

from saber.config import ClusterSettings
from saber.gateway.control.learning import Learning
from saber.gateway.control.settings import BackendProfile
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.gateway.upstream.breaker import Breaker
from saber.gateway.upstream.client import BackendFailure, Upstream, make_client
from saber.gateway.upstream.watch import BackendWatch, control_client
from saber.scheduler import Action, Decision, Pool, Scheduler, budget_of, derived_headroom

log = logging.getLogger(GATEWAY_LOGGER)

PROBE_TIMEOUT_S = 2.0
BREAKING = frozenset({"connect", "reset", "timeout", "status_5xx"})
"""Failures that count against a backend (``BackendFailure.kind``); a 4xx is the
request's fault, a broken stream may be the client's."""


class Replica:
    """One backend: its settings, scheduler, client, watch, breaker and learning."""

    def __init__(self, index: int, profile: BackendProfile, scheduler: Scheduler) -> None:
        backend = profile.backend
        self.index = index
        self.name = backend.name
        self.settings = backend.settings
        self.profile = profile
        self.scheduler = scheduler
        self.watch = BackendWatch(self.settings)
        self.breaker = Breaker(self.settings.eject_after, self.settings.eject_s)
        self.learning: Learning | None = None
        self._upstream: Upstream | None = None
        self.admitted = 0  # sequences admitted here since the last read of its /metrics
        self.stale = False  # its last read is too old to count (cluster.stale: closed)

    @property
    def upstream(self) -> Upstream:
        if self._upstream is None:
            raise RuntimeError("the gateway has not started")
        return self._upstream

    @property
    def ejected(self) -> bool:
        return self.breaker.open or self.stale

    @property
    def ejections(self) -> int:
        return self.breaker.ejections

    def profile_ratio(self) -> float | None:
        return None if self.learning is None else self.learning.profile_ratio()

    def state_suffix(self, several: bool) -> str:
        """What its learning adds to the state file's name (nothing for the one backend)."""
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.name) if several else ""


class Replicas:
    """The gateway's backends, in the pool's order, and their upkeep."""

    def __init__(
        self,
        replicas: Sequence[Replica],
        pool: Pool,
        cluster: Callable[[], ClusterSettings],
        clock: Callable[[], float],
        poke: Callable[[], None],
    ) -> None:
        self.all = list(replicas)
        self.pool = pool
        self._cluster = cluster  # the settings in force
        self._clock = clock  # the admission clock
        self._poke = poke  # admission polls the pool: what waits may run or move
        self._rotation = itertools.cycle(range(len(self.all)))
        self._probes: dict[int, asyncio.Task[None]] = {}
        for r in self.all:
            r.watch.on_scrape = lambda r=r: self.scraped(r)

    def __iter__(self) -> Iterator[Replica]:
        return iter(self.all)

    def __len__(self) -> int:
        return len(self.all)

    @property
    def several(self) -> bool:
        return len(self.all) > 1

    # -- lifecycle --------------------------------------------------------------------

    async def start(self, transport: httpx.AsyncBaseTransport | None = None) -> None:
        cluster = self._cluster()
        fixed = cluster.headroom if cluster.gateways > 1 else None
        for r in self.all:
            r._upstream = Upstream(r.settings, make_client(r.settings, transport))
            if fixed and r.watch.interval > 0:
                r.scheduler.set_budget(budget_of(fixed, cluster.gateways), r.watch.interval)
                self.pool.set_elsewhere(r.index, 0, fixed, self._clock())
        await asyncio.gather(
            *(r.watch.start(control_client(r.settings, transport)) for r in self.all)
        )

    async def stop(self) -> None:
        probes = list(self._probes.values())
        for task in probes:
            task.cancel()
        for task in probes:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._probes.clear()
        for r in self.all:
            await r.watch.stop()
            if r._upstream is not None:
                await r._upstream.aclose()

    # -- where a request runs -----------------------------------------------------------

    def of(self, index: int | None) -> Replica:
        """The backend the pool placed a request on (the first, if it knows none)."""
        return self.all[index or 0]

    def serving(self) -> Replica:
        """A backend for what admission does not place (models, pass-through routes):
        the next in turn that is not ejected, else the next in turn."""
        first = None
        for _ in self.all:
            r = self.all[next(self._rotation)]
            first = first or r
            if not r.ejected:
                return r
        assert first is not None
        return first

    def on_decision(self, d: Decision) -> None:
        """An admission counts toward the headroom its backend's gateways keep."""
        if d.action is Action.ADMIT:
            where = self.pool.backend_of(d.request.id)
            if where is not None:
                self.all[where].admitted += d.request.seqs

    # -- health -----------------------------------------------------------------------

    def answered(self, r: Replica, status: int) -> None:
        """The backend answered a relayed request with ``status``."""
        if status >= 500:
            self.failed(r, "status_5xx")
        elif r.breaker.succeeded():
            self._set_down(r, "serves again")

    def failed(self, r: Replica, kind: str) -> None:
        """The backend failed a relayed request (``BackendFailure.kind``)."""
        if kind not in BREAKING or not self.several:
            return
        if r.breaker.failed(self._clock()):
            self._set_down(r, f"ejected after {r.breaker.failures} failures in a row")
            probing = self._probes.get(r.index)
            if probing is None or probing.done():
                self._probes[r.index] = asyncio.create_task(
                    self._probe(r), name=f"saber-probe-{r.name}"
                )

    async def _probe(self, r: Replica) -> None:
        """While its breaker is open: one GET /health each time it is due."""
        try:
            while r.breaker.open:
                due = r.breaker.probe_at or self._clock()
                await asyncio.sleep(max(due - self._clock(), 0.0))
                ok = await self._healthy(r)
                if r.breaker.probed(ok, self._clock()):
                    self._set_down(r, "serves again: /health answered")
        finally:
            if self._probes.get(r.index) is asyncio.current_task():
                del self._probes[r.index]

    async def _healthy(self, r: Replica) -> bool:
        try:
            status, _ = await r.upstream.get_json("/health", timeout=PROBE_TIMEOUT_S)
        except BackendFailure:
            return False
        return status < 500

    # -- other gateways ---------------------------------------------------------------

    def scraped(self, r: Replica) -> None:
        """After a read of ``r``'s /metrics: whether it is down, what other gateways run
        there, and whether it still counts as known. One gateway counts nothing from the
        read (its own count is the truth; the read is only shown).

        A read that finds nothing listening counts against the breaker as a refused
        request would: a gateway learns a backend died without sending it traffic. The
        engine's mean time to first token since the read before is the wait placement
        takes off a request's time left there (streams report theirs as they come; this
        counts every request, streamed or not, every gateway's)."""
        if r.watch.refused:
            self.failed(r, "connect")
        if r.watch.ttft_s is not None:
            self.pool.set_first_token_wait(r.index, r.watch.ttft_s)
        cluster = self._cluster()
        counting = cluster.gateways > 1
        closing = cluster.stale == "closed" and self.several
        if not (counting or closing):
            return
        load = r.watch.fresh_load()
        if counting:
            now = self._clock()
            admitted, r.admitted = r.admitted, 0
            headroom = (
                cluster.headroom
                if cluster.headroom is not None
                else derived_headroom(cluster.gateways, admitted)
            )
            others = 0 if load is None else round(load.running + load.waiting) - r.scheduler.load
            self.pool.set_elsewhere(r.index, max(others, 0), headroom, now)
        stale = load is None and closing
        if stale != r.stale:
            r.stale = stale
            self._set_down(r, "its /metrics is stale" if stale else "its /metrics reads again")
        else:
            self._poke()

    def _set_down(self, r: Replica, why: str) -> None:
        self.pool.set_down(r.index, r.ejected)
        (log.warning if r.ejected else log.info)(
            f"backend {r.name}: {why}",
            extra={"backend": r.name, "url": r.settings.url, "ejected": r.ejected},
        )
        self._poke()
