"""The virtual-time simulator for a pool of engine replicas.

One trace, several engines (each its own preset and clock), and either a router that
sends each arrival to a replica at once, or an admission pool that decides when and
where each request runs. Events are processed in time order: arrivals, the pool's
wake-ups, the start of each engine's next step and the end of each engine's step.
A step's news (tokens, finishes) is reported at its end, so the pool hears about
every replica in time order. At equal times arrivals and wake-ups come first, then
step ends, then step starts: what arrives at a step boundary joins that step, as in
vLLM and as in ``simulate``.

Replicas meet only at the router or the pool. With a router, an engine may run
decode steps back to back until the next arrival. With a pool, a finish on one
replica may admit a request to another, so an engine also stops before starting a
step at or after another busy engine's next step boundary; every request then joins
its replica at the first step boundary after its admission, as in ``simulate``.

Several gateways (``gateways``), each its own admission pool over every replica, know
of each other only through scrapes (``saber.sim._gateways``): a scrape is an event
too, after the arrivals and wake-ups at its time, and an engine also stops before
starting a step at or after the next scrape, so each scrape sees it within one step.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from saber.config import TaskType
from saber.engine import Engine, EngineRequest, StepResult
from saber.scheduler import Action, Tier
from saber.sim._cluster_types import AdmissionPool, BackendStats, ClusterResult, Placed
from saber.sim._gateways import SCRAPE_S, Gateways
from saber.sim._records import SimRecord, judged_by
from saber.sim._routers import BackendView, Router
from saber.sim._virtual import engine_request, own_slo, scheduler_request
from saber.workload import TraceRequest

_MAX_STEPS = 1 << 30


def simulate_cluster(
    trace: Sequence[TraceRequest],
    engines: Sequence[Engine],
    *,
    tasks: Mapping[str, TaskType],
    router: Router | None = None,
    pool: AdmissionPool | None = None,
    gateways: Sequence[AdmissionPool] | None = None,
    scrape_s: float = SCRAPE_S,
    headroom: int | None = None,
    trust_max_tokens: bool = False,
) -> ClusterResult:
    """Serve ``trace`` on fresh ``engines`` in virtual time, behind exactly one of
    ``router`` (every arrival goes at once to the replica it picks), ``pool``
    (arrivals become scheduler input through ``request_for`` with the pool's
    ``lengths``; an ADMIT runs the request on ``placed.backend``; after each step the
    pool hears every running request's generated count and each finish, and is polled
    after a finish, as ``simulate`` drives one scheduler) or ``gateways``, several
    such pools with no shared store: each arrival goes to one
    (``saber.sim._gateways.gateway_of``), which alone hears of it; every ``scrape_s``
    each gateway learns the requests at each replica that are not its own
    (``set_elsewhere``, with ``headroom`` for what the others admit until its next
    scrape: None derives it, ``derived_headroom``) and is polled. ``gateways=[p]`` is
    ``pool=p``. ``trust_max_tokens``: as in ``simulate``.
    """
    if sum(x is not None for x in (router, pool, gateways)) != 1:
        raise ValueError("simulate_cluster needs exactly one of router and pool (or gateways)")
    if not engines:
        raise ValueError("simulate_cluster needs at least one engine")
    if len({id(e) for e in engines}) != len(engines):
        raise ValueError("each engine may appear once")
    if any(not e.idle or e.total_steps for e in engines):
        raise ValueError("simulate_cluster needs fresh engines")
    ordered = sorted(trace, key=lambda r: r.arrival)
    if len({r.id for r in ordered}) != len(ordered):
        raise ValueError("trace request ids must be unique")
    unknown = {r.task for r in ordered} - set(tasks)
    if unknown:
        raise ValueError(f"unknown task type(s): {', '.join(sorted(unknown))}")
    pools = [pool] if pool is not None else list(gateways or [])
    gw = None if router is not None else Gateways(pools, len(engines), scrape_s, headroom)
    run = _Run(ordered, list(engines), tasks, router, gw, trust_max_tokens)
    run.loop()
    return run.result()


@dataclass(eq=False)
class _Run:
    """One run's state: the trace's cursor, each engine's step in flight, who is where."""

    trace: list[TraceRequest]
    engines: list[Engine]
    tasks: Mapping[str, TaskType]
    router: Router | None
    gw: Gateways | None
    trust_max_tokens: bool
    next: int = 0  # index of the next arrival
    admitted_at: dict[str, float] = field(default_factory=dict)
    in_engine: dict[str, EngineRequest] = field(default_factory=dict)
    served_by: dict[str, int] = field(default_factory=dict)
    demoted: set[str] = field(default_factory=set)
    rejected: set[str] = field(default_factory=set)
    calls: int = 0

    def __post_init__(self) -> None:
        self.by_id = {r.id: r for r in self.trace}
        n = len(self.engines)
        self.ready = [-math.inf] * n  # when each busy engine's next step may start
        self.stepping: list[StepResult | None] = [None] * n  # a step whose end is unheard
        self.finished = [0] * n
        self.most = [0] * n  # the most requests each engine held at a step's start
        self.pools = [] if self.gw is None else list(self.gw.pools)
        self.polled_wake = [-math.inf] * len(self.pools)

    # -- what happens next -------------------------------------------------

    def next_arrival(self) -> float:
        return self.trace[self.next].arrival if self.next < len(self.trace) else math.inf

    def next_wakeup(self) -> tuple[float, int]:
        """The earliest wake-up of a pool, and that pool; one already polled (a stuck
        pool) is ignored."""
        soonest = (math.inf, 0)
        for g, pool in enumerate(self.pools):
            wake = pool.next_wakeup()
            if wake is not None and wake > self.polled_wake[g]:
                soonest = min(soonest, (wake, g))
        return soonest

    def next_scrape(self) -> tuple[float, int]:
        return (math.inf, 0) if self.gw is None else self.gw.next_scrape()

    def stale(self) -> bool:
        return self.gw is not None and self.gw.stale()

    def boundary(self, i: int) -> float:
        """Engine ``i``'s next step boundary: its step's end, or its next start."""
        step = self.stepping[i]
        if step is not None:
            return step.end
        return math.inf if self.engines[i].idle else self.ready[i]

    def loop(self) -> None:
        engines = range(len(self.engines))
        while True:
            arrival, (wake, g) = self.next_arrival(), self.next_wakeup()
            # The earliest step boundary; at equal times a step's end before a start.
            at, starts, i = min((self.boundary(i), self.stepping[i] is None, i) for i in engines)
            now = min(arrival, wake, at)
            scrape, s = self.next_scrape()
            if now == math.inf and (scrape == math.inf or not self.stale()):
                return  # nothing left, and no scrape would change a gateway's view
            if scrape < now:
                self.scrape(s, scrape)
            elif arrival == now:
                self.arrive(self.trace[self.next])
                self.next += 1
            elif wake == now:
                self.polled_wake[g] = wake
                self.apply(self.pools[g].poll(wake), g)
            elif scrape == now:
                self.scrape(s, scrape)
            elif starts:
                self.step(i, at)
            else:
                self.report(i)

    # -- events --------------------------------------------------------------

    def arrive(self, req: TraceRequest) -> None:
        if self.router is not None:
            views = [_view(i, e) for i, e in enumerate(self.engines)]
            self.send(req.id, self.router.pick(views), req.arrival)
            return
        assert self.gw is not None
        pool = self.gw.take(req.id)
        sreq = scheduler_request(req, self.tasks[req.task], pool.lengths, self.trust_max_tokens)
        self.apply(pool.offer(sreq, req.arrival), self.gw.owner[req.id])

    def apply(self, placed: Sequence[Placed], g: int) -> None:
        """Carry out gateway ``g``'s decisions."""
        for p in placed:
            d = p.decision
            if d.action is Action.ADMIT:
                self.send(d.request.id, p.backend, d.at, d.tier)
                assert self.gw is not None
                self.gw.admitted(g, p.backend)
            elif d.action is Action.DEMOTE:
                self.demoted.add(d.request.id)
            elif d.action is Action.REJECT:
                self.rejected.add(d.request.id)

    def send(self, rid: str, backend: int, at: float, tier: Tier = Tier.HIGH) -> None:
        """Hand ``rid`` to engine ``backend`` at ``at``; it joins at that engine's next
        step boundary. A demoted request's tier becomes vLLM's priority, as in
        ``simulate``."""
        if not 0 <= backend < len(self.engines):
            raise ValueError(f"request {rid}: no backend {backend} among {len(self.engines)}")
        if rid in self.in_engine:
            raise ValueError(f"request {rid} was sent twice")
        engine, req = self.engines[backend], self.by_id[rid]
        if engine.idle and self.stepping[backend] is None:
            self.ready[backend] = max(at, engine.clock)
        ereq = engine_request(req, tier)
        engine.add(ereq)
        self.in_engine[rid] = ereq
        self.served_by[rid] = backend
        self.admitted_at[rid] = at

    def step(self, i: int, start: float) -> None:
        """Start engine ``i``'s steps at ``start``, run back to back until the next
        time the router, a pool or a scrape may have news for it (the module's
        docstring)."""
        engine = self.engines[i]
        held = engine.num_running + engine.num_waiting
        self.most[i] = max(self.most[i], held)
        until = self.next_arrival()
        if self.gw is not None:
            self.gw.step_starts(i, held)
            others = (self.boundary(j) for j in range(len(self.engines)) if j != i)
            until = min(until, self.next_wakeup()[0], self.next_scrape()[0], *others)
        res = engine.step(start, max_steps=_MAX_STEPS, until=None if until == math.inf else until)
        assert res is not None
        self.calls += 1
        self.stepping[i] = res

    def report(self, i: int) -> None:
        """Engine ``i``'s step has ended: each request's gateway hears its tokens and
        its finish, and a gateway that heard a finish is polled."""
        res = self.stepping[i]
        assert res is not None
        self.stepping[i] = None
        now = self.ready[i] = res.end
        self.finished[i] += len(res.finished)
        gw = self.gw
        if gw is None:
            return
        pools, owner = self.pools, gw.owner
        for rid, at in res.first_tokens.items():
            gw.first_token(i, at - self.admitted_at[rid])
        for rid in res.tokens:
            ereq = self.in_engine[rid]
            if ereq.finished_at is None:
                pools[owner[rid]].progress(rid, ereq.generated, now)
        heard: set[int] = set()
        for ereq in res.finished:
            g = owner[ereq.id]
            pools[g].finish(ereq.id, now, ereq.generated, ereq.prompt_tokens)
            gw.finished(g, i)
            heard.add(g)
        for g in sorted(heard):
            self.apply(pools[g].poll(now), g)

    def scrape(self, g: int, now: float) -> None:
        """Gateway ``g`` reads every engine's running + waiting at ``now`` and counts as
        elsewhere what is not its own (a request of a step still running that finished
        by ``now`` is gone from both), then is polled."""
        assert self.gw is not None
        own, seen = self.gw.own[g], []
        for b, engine in enumerate(self.engines):
            total, mine = engine.num_running + engine.num_waiting, own[b]
            step = self.stepping[b]  # the engine has already run it whole: undo its future
            for ereq in step.finished if step is not None else ():
                if ereq.finished_at is not None and ereq.finished_at > now:
                    total += 1
                elif self.gw.owner[ereq.id] == g:
                    mine -= 1
            seen.append(max(total - mine, 0))
        self.gw.scraped(g, now, seen)
        self.apply(self.pools[g].poll(now), g)

    # -- the outcome ---------------------------------------------------------

    def record(self, req: TraceRequest) -> SimRecord:
        ereq, task = self.in_engine.get(req.id), self.tasks[req.task]
        return SimRecord(
            id=req.id,
            task=req.task,
            arrival=req.arrival,
            sla_s=task.sla_s,
            admitted_at=self.admitted_at.get(req.id),
            started_at=None if ereq is None else ereq.started_at,
            first_token_at=None if ereq is None else ereq.first_token_at,
            finished_at=None if ereq is None else ereq.finished_at,
            output_tokens=0 if ereq is None else ereq.generated,
            preemptions=0 if ereq is None else ereq.preemptions,
            demoted=req.id in self.demoted,
            rejected=req.id in self.rejected,
            sla_kind=task.sla_kind,
            slo=judged_by(task, own_slo(req)),
        )

    def result(self) -> ClusterResult:
        records = [self.record(req) for req in self.trace]
        unfinished = [r.id for r in records if r.finished_at is None and not r.rejected]
        served = Counter(self.served_by.values())
        engines, gw = self.engines, self.gw
        return ClusterResult(
            records=records,
            steps=sum(e.total_steps for e in engines),
            engine_calls=self.calls,
            preemptions=sum(e.total_preemptions for e in engines),
            max_running=max(e.max_running for e in engines),
            end=max((e.clock for e in engines if e.total_steps), default=0.0),
            unfinished=unfinished,
            served_by=dict(self.served_by),
            backends=[
                BackendStats(i, e.preset.name, served[i], self.finished[i], e.max_running,
                             e.total_preemptions, e.total_steps, self.most[i])
                for i, e in enumerate(engines)
            ],
            gateways=[] if gw is None else gw.stats(),
        )  # fmt: skip


def _view(index: int, engine: Engine) -> BackendView:
    """A replica as a router sees it: the engine's state at the end of its latest step,
    which may end after the arrival, by less than one step (a step runs whole here)."""
    waiting, running = engine.num_waiting, engine.num_running
    return BackendView(index, running + waiting, running, waiting, engine.kv_usage)
