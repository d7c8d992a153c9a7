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
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from saber.config import TaskType
from saber.engine import Engine, EngineRequest, StepResult
from saber.scheduler import Action, Decision, SchedRequest, TaskLengths, Tier, request_for
from saber.sim._records import SimRecord, SimResult
from saber.sim._routers import BackendView, Router
from saber.workload import TraceRequest

_MAX_STEPS = 1 << 30


class Placed(Protocol):
    """A pool's decision and the replica it concerns (where an admitted request runs)."""

    @property
    def decision(self) -> Decision: ...
    @property
    def backend(self) -> int: ...


class AdmissionPool(Protocol):
    """Admission and placement over the replicas, driven like one scheduler: the part of
    ``saber.scheduler.Pool`` the simulator drives."""

    lengths: TaskLengths

    def offer(self, req: SchedRequest, now: float) -> Sequence[Placed]: ...
    def poll(self, now: float) -> Sequence[Placed]: ...
    def progress(self, req_id: str, tokens: int, now: float) -> None: ...
    def finish(self, req_id: str, now: float, tokens: int | None = None) -> object: ...
    def next_wakeup(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class BackendStats:
    """What one replica did: requests handed to it and finished there, the most it ran
    at once, its preemptions and steps."""

    index: int
    preset: str
    served: int
    finished: int
    max_running: int
    preemptions: int
    steps: int


@dataclass(slots=True)
class ClusterResult(SimResult):
    """A pool's run: a ``SimResult`` over every replica (so the bench scores it as one
    run), where each request was served, and each replica's counts.

    ``steps``, ``engine_calls`` and ``preemptions`` are summed over the replicas,
    ``max_running`` is the most any one replica ran at once, and ``end`` is when the
    last step of any replica ended.
    """

    served_by: dict[str, int] = field(default_factory=dict)  # request id -> replica
    backends: list[BackendStats] = field(default_factory=list)


def simulate_cluster(
    trace: Sequence[TraceRequest],
    engines: Sequence[Engine],
    *,
    tasks: Mapping[str, TaskType],
    router: Router | None = None,
    pool: AdmissionPool | None = None,
    trust_max_tokens: bool = False,
) -> ClusterResult:
    """Serve ``trace`` on fresh ``engines`` in virtual time, behind exactly one of
    ``router`` (every arrival goes at once to the replica it picks) or ``pool``
    (arrivals become scheduler input through ``request_for`` with the pool's
    ``lengths``; an ADMIT runs the request on ``placed.backend``; after each step the
    pool hears every running request's generated count and each finish, and is polled
    after a finish, as ``simulate`` drives one scheduler). ``trust_max_tokens``: as
    in ``simulate``.
    """
    if (router is None) == (pool is None):
        raise ValueError("simulate_cluster needs exactly one of router and pool")
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
    run = _Run(ordered, list(engines), tasks, router, pool, trust_max_tokens)
    run.loop()
    return run.result()


@dataclass(eq=False)
class _Run:
    """One run's state: the trace's cursor, each engine's step in flight, who is where."""

    trace: list[TraceRequest]
    engines: list[Engine]
    tasks: Mapping[str, TaskType]
    router: Router | None
    pool: AdmissionPool | None
    trust_max_tokens: bool
    next: int = 0  # index of the next arrival
    admitted_at: dict[str, float] = field(default_factory=dict)
    in_engine: dict[str, EngineRequest] = field(default_factory=dict)
    served_by: dict[str, int] = field(default_factory=dict)
    demoted: set[str] = field(default_factory=set)
    rejected: set[str] = field(default_factory=set)
    calls: int = 0
    polled_wake: float = -math.inf

    def __post_init__(self) -> None:
        self.by_id = {r.id: r for r in self.trace}
        n = len(self.engines)
        self.ready = [-math.inf] * n  # when each busy engine's next step may start
        self.stepping: list[StepResult | None] = [None] * n  # a step whose end is unheard
        self.finished = [0] * n

    # -- what happens next -------------------------------------------------

    def next_arrival(self) -> float:
        return self.trace[self.next].arrival if self.next < len(self.trace) else math.inf

    def next_wakeup(self) -> float:
        """The pool's next wake-up; one already polled (a stuck pool) is ignored."""
        if self.pool is None:
            return math.inf
        wake = self.pool.next_wakeup()
        return math.inf if wake is None or wake <= self.polled_wake else wake

    def boundary(self, i: int) -> float:
        """Engine ``i``'s next step boundary: its step's end, or its next start."""
        step = self.stepping[i]
        if step is not None:
            return step.end
        return math.inf if self.engines[i].idle else self.ready[i]

    def loop(self) -> None:
        engines = range(len(self.engines))
        while True:
            arrival, wake = self.next_arrival(), self.next_wakeup()
            # The earliest step boundary; at equal times a step's end before a start.
            at, starts, i = min((self.boundary(i), self.stepping[i] is None, i) for i in engines)
            now = min(arrival, wake, at)
            if now == math.inf:
                return
            if arrival == now:
                self.arrive(self.trace[self.next])
                self.next += 1
            elif wake == now:
                assert self.pool is not None
                self.polled_wake = wake
                self.apply(self.pool.poll(wake))
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
        assert self.pool is not None
        sreq = request_for(
            self.tasks[req.task],
            lengths=self.pool.lengths,
            id=req.id,
            arrival=req.arrival,
            max_tokens=req.max_tokens,
            tokens=req.max_tokens if self.trust_max_tokens else None,
        )
        self.apply(self.pool.offer(sreq, req.arrival))

    def apply(self, placed: Sequence[Placed]) -> None:
        for p in placed:
            d = p.decision
            if d.action is Action.ADMIT:
                self.send(d.request.id, p.backend, d.at, d.tier)
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
        ereq = EngineRequest(
            rid,
            req.prompt_tokens,
            req.output_tokens,
            arrival=req.arrival,
            priority=tier.engine_priority,
        )
        engine.add(ereq)
        self.in_engine[rid] = ereq
        self.served_by[rid] = backend
        self.admitted_at[rid] = at

    def step(self, i: int, start: float) -> None:
        """Start engine ``i``'s steps at ``start``, run back to back until the next
        time the router or the pool may have news for it (the module's docstring)."""
        until = self.next_arrival()
        if self.pool is not None:
            others = (self.boundary(j) for j in range(len(self.engines)) if j != i)
            until = min(until, self.next_wakeup(), *others)
        res = self.engines[i].step(
            start, max_steps=_MAX_STEPS, until=None if until == math.inf else until
        )
        assert res is not None
        self.calls += 1
        self.stepping[i] = res

    def report(self, i: int) -> None:
        """Engine ``i``'s step has ended: the pool hears its tokens and finishes."""
        res = self.stepping[i]
        assert res is not None
        self.stepping[i] = None
        now = self.ready[i] = res.end
        self.finished[i] += len(res.finished)
        pool = self.pool
        if pool is None:
            return
        for rid in res.tokens:
            ereq = self.in_engine[rid]
            if ereq.finished_at is None:
                pool.progress(rid, ereq.generated, now)
        if res.finished:
            for ereq in res.finished:
                pool.finish(ereq.id, now, ereq.generated)
            self.apply(pool.poll(now))

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
        )

    def result(self) -> ClusterResult:
        records = [self.record(req) for req in self.trace]
        unfinished = [r.id for r in records if r.finished_at is None and not r.rejected]
        served = Counter(self.served_by.values())
        engines = self.engines
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
                             e.total_preemptions, e.total_steps)
                for i, e in enumerate(engines)
            ],
        )  # fmt: skip


def _view(index: int, engine: Engine) -> BackendView:
    """A replica as a router sees it: the engine's state at the end of its latest step,
    which may end after the arrival, by less than one step (a step runs whole here)."""
    waiting, running = engine.num_waiting, engine.num_running
    return BackendView(index, running + waiting, running, waiting, engine.kv_usage)
