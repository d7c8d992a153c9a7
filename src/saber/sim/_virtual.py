"""The virtual-time simulator: a trace, an engine, and optionally SABER in front.

Events are processed in time order: arrivals (each at its own arrival time),
engine steps (run back to back until the next arrival or scheduler wake-up),
finishes (the scheduler is told, then polled) and wake-ups (polled). An arrival
that lands during a step joins the engine at the next step boundary, as in vLLM.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from saber.config import Slo, TaskType
from saber.engine import Engine, EnginePreset, EngineRequest
from saber.scheduler import (
    Action,
    Decision,
    SchedRequest,
    Scheduler,
    TaskLengths,
    Tier,
    request_for,
)
from saber.sim._records import SimRecord, SimResult, judged_by
from saber.speed import LiveFit, SpeedModel
from saber.workload import TraceRequest

_MAX_STEPS = 1 << 30


class AdmissionScheduler(Protocol):
    """The part of ``saber.scheduler.Scheduler`` the simulator drives."""

    lengths: TaskLengths

    def offer(self, req: SchedRequest, now: float) -> list[Decision]: ...
    def poll(self, now: float) -> list[Decision]: ...
    def progress(self, req_id: str, tokens: int, now: float) -> None: ...
    def finish(
        self, req_id: str, now: float, tokens: int | None = None, prompt_tokens: int | None = None
    ) -> object: ...
    def next_wakeup(self) -> float | None: ...


Told = bool | Collection[str]
"""Which requests' max_tokens is their true length, and the scheduler told so: all
(True), none (False), or those of the task types named."""


def scheduler_request(
    req: TraceRequest, task: TaskType, lengths: TaskLengths, told: Told
) -> SchedRequest:
    """A trace's request as the scheduler sees it on arrival, as the gateway builds it:
    its task, its max_tokens (its true length where ``told``), its prompt's size in
    bytes and its fingerprint."""
    exact = told is True or (not isinstance(told, bool) and req.task in told)
    return request_for(
        task,
        slo=own_slo(req),
        lengths=lengths,
        id=req.id,
        arrival=req.arrival,
        max_tokens=req.max_tokens,
        tokens=req.max_tokens if exact else None,
        prompt_bytes=req.size_in_bytes,
        fingerprint=req.fingerprint,
    )


def own_slo(req: TraceRequest) -> Slo | None:
    """The limits a trace's request states for itself, if any."""
    if req.ttft_s is None and req.tpot_s is None and req.e2e_s is None:
        return None
    return Slo(ttft_s=req.ttft_s, tpot_s=req.tpot_s, e2e_s=req.e2e_s)


def engine_request(req: TraceRequest, tier: Tier) -> EngineRequest:
    """A trace's request as the engine receives it: its tier as vLLM's priority."""
    return EngineRequest(
        req.id,
        req.prompt_tokens,
        req.output_tokens,
        arrival=req.arrival,
        priority=tier.engine_priority,
    )


def simulate(
    trace: Sequence[TraceRequest],
    engine: Engine,
    *,
    tasks: Mapping[str, TaskType],
    scheduler: AdmissionScheduler | None = None,
    trust_max_tokens: Told = False,
    refit: LiveFit | None = None,
    drift: Sequence[tuple[float, EnginePreset]] = (),
) -> SimResult:
    """Serve ``trace`` on a fresh ``engine`` in virtual time.

    Without a scheduler every arrival goes straight to the engine (the paper's
    static baseline: the engine's ``max_num_seqs`` is the batch size). With one,
    the scheduler decides when each request reaches the engine; each arrival
    becomes scheduler input through ``request_for`` with the scheduler's learned
    ``lengths``, and after every engine
    step each running request's generated count goes to ``scheduler.progress``, as
    the gateway does with each streamed frame. ``trust_max_tokens`` tells the
    scheduler that a request's ``max_tokens`` is its true length (the paper's oracle
    set-up; or, naming task types, for theirs); otherwise it estimates, as the gateway
    does, from what the request carries (``scheduler_request``). A request admitted from the
    low (demoted) tier reaches the engine with priority 1, others with 0, as the
    gateway forwards them; only an engine under the priority policy looks.

    ``refit`` refits the scheduler's speed model on what finished requests
    observed, inline, as the gateway does in the background, and swaps it in when it
    departs. ``drift`` changes the engine under the scheduler's feet: from each
    time on, the engine's steps take the time of that preset (a slower GPU, a noisy
    neighbour).
    """
    if refit is not None and not isinstance(scheduler, Scheduler):
        raise ValueError("refit needs a saber.scheduler.Scheduler")
    if not engine.idle or engine.total_steps:
        raise ValueError("simulate needs a fresh engine")
    trace = sorted(trace, key=lambda r: r.arrival)
    ids = [r.id for r in trace]
    if len(set(ids)) != len(ids):
        raise ValueError("trace request ids must be unique")
    unknown = {r.task for r in trace} - set(tasks)
    if unknown:
        raise ValueError(f"unknown task type(s): {', '.join(sorted(unknown))}")
    drift_in_order = sorted(drift, key=lambda change: change[0])
    run = _Run(trace, engine, tasks, scheduler, trust_max_tokens, refit, drift_in_order)
    run.loop()
    return run.result()


@dataclass(eq=False)
class _Run:
    """One simulation's state: the trace's cursor, who is where, and what was decided."""

    trace: list[TraceRequest]
    engine: Engine
    tasks: Mapping[str, TaskType]
    scheduler: AdmissionScheduler | None
    trust_max_tokens: Told
    refit: LiveFit | None
    drift: list[tuple[float, EnginePreset]]
    next: int = 0  # index of the next arrival
    admitted_at: dict[str, float] = field(default_factory=dict)
    in_engine: dict[str, EngineRequest] = field(default_factory=dict)
    demoted: set[str] = field(default_factory=set)
    rejected: set[str] = field(default_factory=set)
    calls: int = 0
    polled_wake: float = -math.inf
    swaps: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.by_id = {r.id: r for r in self.trace}

    # -- events ----------------------------------------------------------

    def next_arrival(self) -> float:
        return self.trace[self.next].arrival if self.next < len(self.trace) else math.inf

    def next_wakeup(self) -> float:
        """The scheduler's next wake-up; one already polled (a stuck scheduler) is ignored."""
        if self.scheduler is None:
            return math.inf
        wake = self.scheduler.next_wakeup()
        if wake is None or wake <= self.polled_wake:
            return math.inf
        return wake

    def advance_to(self, t: float) -> None:
        """Arrivals and scheduler wake-ups up to ``t``, in time order, each at its time."""
        while True:
            arrival, wake = self.next_arrival(), self.next_wakeup()
            if arrival <= wake and arrival <= t and arrival < math.inf:
                self.arrive(self.trace[self.next])
                self.next += 1
            elif wake < arrival and wake <= t and self.scheduler is not None:
                self.polled_wake = wake
                self.apply(self.scheduler.poll(wake))
            else:
                return

    def arrive(self, req: TraceRequest) -> None:
        if self.scheduler is None:
            self.admit(req.id, req.arrival)
            return
        sreq = scheduler_request(
            req, self.tasks[req.task], self.scheduler.lengths, self.trust_max_tokens
        )
        self.apply(self.scheduler.offer(sreq, req.arrival))

    def apply(self, decisions: list[Decision]) -> None:
        for d in decisions:
            rid = d.request.id
            if d.action is Action.ADMIT:
                self.admit(rid, d.at, d.tier)
            elif d.action is Action.DEMOTE:
                self.demoted.add(rid)
            elif d.action is Action.REJECT:
                self.rejected.add(rid)

    def admit(self, rid: str, at: float, tier: Tier = Tier.HIGH) -> None:
        """Hand ``rid`` to the engine. Its tier becomes vLLM's priority (demoted work
        ranks below), which only an engine under the priority policy looks at."""
        ereq = engine_request(self.by_id[rid], tier)
        self.engine.add(ereq)
        self.in_engine[rid] = ereq
        self.admitted_at[rid] = at

    # -- the loop --------------------------------------------------------

    def loop(self) -> None:
        engine, sched = self.engine, self.scheduler
        now = self.next_arrival()
        while True:
            self.advance_to(now)
            while self.drift and self.drift[0][0] <= now:
                engine.preset = self.drift.pop(0)[1]
            change = self.drift[0][0] if self.drift else math.inf
            until = min(self.next_arrival(), self.next_wakeup(), change)
            if engine.idle:
                if until == math.inf:
                    return
                now = until
                continue
            res = engine.step(now, max_steps=_MAX_STEPS, until=None if until == math.inf else until)
            assert res is not None
            self.calls += 1
            now = res.end
            # What happened during the step comes first, then the finishes at its end.
            self.advance_to(now)
            if sched is not None:
                for rid in res.tokens:
                    ereq = self.in_engine[rid]
                    if ereq.finished_at is None:
                        sched.progress(rid, ereq.generated, now)
                if res.finished:
                    for ereq in res.finished:
                        sched.finish(ereq.id, now, ereq.generated, ereq.prompt_tokens)
                    if self.refit is not None:
                        self.refit_now(now)
                    self.apply(sched.poll(now))

    def refit_now(self, now: float) -> None:
        sched, fit = self.scheduler, self.refit
        assert isinstance(sched, Scheduler) and fit is not None
        while sched.observations:
            seen = sched.observations.popleft()
            fit.observe(seen.load, seen.speed)
        current = sched.speed_model
        if not fit.due() or not isinstance(current, SpeedModel):
            return
        result = fit.judge(current, current.kind, *fit.snapshot())
        if result is not None and result.swap:
            sched.set_speed_model(result.model)
            self.swaps.append(now)

    def result(self) -> SimResult:
        records = []
        unfinished = []
        for req in self.trace:
            ereq = self.in_engine.get(req.id)
            finished_at = ereq.finished_at if ereq is not None else None
            rejected = req.id in self.rejected
            if finished_at is None and not rejected:
                unfinished.append(req.id)
            records.append(
                SimRecord(
                    id=req.id,
                    task=req.task,
                    arrival=req.arrival,
                    sla_s=self.tasks[req.task].sla_s,
                    admitted_at=self.admitted_at.get(req.id),
                    started_at=ereq.started_at if ereq is not None else None,
                    first_token_at=ereq.first_token_at if ereq is not None else None,
                    finished_at=finished_at,
                    output_tokens=ereq.generated if ereq is not None else 0,
                    preemptions=ereq.preemptions if ereq is not None else 0,
                    demoted=req.id in self.demoted,
                    rejected=rejected,
                    sla_kind=self.tasks[req.task].sla_kind,
                    slo=judged_by(self.tasks[req.task], own_slo(req)),
                )
            )
        assert len(records) == len(self.by_id) == len({r.id for r in records})
        engine = self.engine
        return SimResult(
            records=records,
            steps=engine.total_steps,
            engine_calls=self.calls,
            preemptions=engine.total_preemptions,
            max_running=engine.max_running,
            end=engine.clock if engine.total_steps else 0.0,
            unfinished=unfinished,
            swaps=self.swaps,
        )
