"""Drives the pure scheduler from asyncio: futures, events, one timer.

Every event (an arrival, a release) calls the scheduler, applies the decisions it
returns, and re-arms the single timer at ``next_wakeup()``: the next moment a
queued request must be demoted or an LPQ entry expires. Nothing polls.

The scheduler's clock is the event loop's (``loop.time()``, monotonic seconds).
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from saber.config import TaskType
from saber.scheduler import Action, Decision, Outcome, SchedRequest, Scheduler, Tier, request_for

Release = Literal["finish", "fail", "cancel"]

RETRY_AFTER_MIN_S = 1
RETRY_AFTER_MAX_S = 120


@dataclass(eq=False, slots=True)
class Ticket:
    """One request's place in the scheduler, from offer to release."""

    req: SchedRequest
    task: TaskType
    streaming: bool
    future: asyncio.Future[Decision]
    tier: Tier = Tier.HIGH
    admitted_at: float | None = None  # loop time
    tokens_out: int = 0  # generated so far, as counted by the relay
    released: bool = False
    outcome: Outcome | None = None  # how it left the scheduler

    @property
    def id(self) -> str:
        return self.req.id

    @property
    def arrival(self) -> float:
        return self.req.arrival

    @property
    def running(self) -> bool:
        return self.admitted_at is not None and not self.released


@dataclass(slots=True)
class TraceEntry:
    """One call into the scheduler, so that a test can replay it on a fresh one."""

    call: str
    now: float
    arg: SchedRequest | str | None = None
    decisions: list[Decision] = field(default_factory=list)


class Admission:
    """The gateway's only door to the scheduler."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        trace: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self._loop = loop or asyncio.get_running_loop()
        self._on_decision = on_decision
        self._tickets: dict[str, Ticket] = {}
        self._ids = itertools.count(1)
        self._last_now = -math.inf
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self.trace: list[TraceEntry] | None = [] if trace else None

    # -- the clock ------------------------------------------------------------------

    def now(self) -> float:
        """Loop time, never going backwards (a timer may fire a hair early)."""
        t = self._loop.time()
        if t < self._last_now:
            t = self._last_now
        self._last_now = t
        return t

    # -- events -----------------------------------------------------------------------

    def submit(
        self, task: TaskType, max_tokens: int | None, *, streaming: bool, min_tokens: int = 0
    ) -> Ticket:
        """Offer a new request. Its future resolves with ADMIT or REJECT, maybe at once.

        ``min_tokens`` is what the backend will generate at the least (vLLM's
        ``min_tokens``): the expected tokens are raised to it.
        """
        now = self.now()
        req = request_for(
            task,
            # Zero-padded, so that ids sort in arrival order when two arrive in one tick.
            id=f"r{next(self._ids):09d}",
            arrival=now,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
        )
        ticket = Ticket(req, task, streaming, self._loop.create_future())
        self._tickets[req.id] = ticket
        self._record("offer", now, req, self.scheduler.offer(req, now))
        return ticket

    def release(self, ticket: Ticket, how: Release) -> Outcome | None:
        """Give the ticket's queue place or slot back. Safe to call any number of
        times from any path: only the first call does anything.

        A ticket that was never admitted is always cancelled (taken out of its
        queue), whatever ``how`` says.
        """
        if ticket.released:
            return None
        ticket.released = True
        self._tickets.pop(ticket.id, None)
        now = self.now()
        if ticket.admitted_at is None or how == "cancel":
            outcome = self.scheduler.cancel(ticket.id, now)
            call = "cancel"
        elif how == "finish":
            outcome = self.scheduler.finish(ticket.id, now)
            call = "finish"
        else:
            outcome = self.scheduler.cancel(ticket.id, now)
            call = "fail"
        ticket.outcome = outcome or ticket.outcome
        if self.trace is not None:
            self.trace.append(TraceEntry(call, now, ticket.id))
        if outcome is not None:
            self._record("poll", now, None, self.scheduler.poll(now))
        if not ticket.future.done():
            ticket.future.cancel()
        return outcome

    def close(self) -> None:
        """Stop the timer (at shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- internals --------------------------------------------------------------------

    def _record(
        self, call: str, now: float, arg: SchedRequest | None, decisions: list[Decision]
    ) -> None:
        if self.trace is not None:
            self.trace.append(TraceEntry(call, now, arg, list(decisions)))
        self._apply(decisions)
        self._rearm()

    def _apply(self, decisions: list[Decision]) -> None:
        for d in decisions:
            ticket = self._tickets.get(d.request.id)
            if self._on_decision is not None:
                self._on_decision(d)
            if ticket is None:  # pragma: no cover - the scheduler only knows our tickets
                continue
            if d.action is Action.ADMIT:
                ticket.admitted_at = d.at
                ticket.tier = d.tier
            elif d.action is Action.DEMOTE:
                ticket.tier = Tier.LOW
                continue
            else:  # REJECT: the scheduler has already let it go
                ticket.released = True
                ticket.outcome = d.outcome
                self._tickets.pop(ticket.id, None)
            if not ticket.future.done():
                ticket.future.set_result(d)

    def _rearm(self) -> None:
        when = self.scheduler.next_wakeup()
        if when == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = when
        if when is not None:
            self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        due = self._timer_at
        self._timer = None
        self._timer_at = None
        now = self.now()
        if due is not None and now < due:
            now = self._last_now = due
        self._record("timer", now, None, self.scheduler.poll(now))

    # -- what the routes ask ----------------------------------------------------------

    @property
    def active(self) -> int:
        """Requests the gateway holds a ticket for: queued or running."""
        return len(self._tickets)

    def running(self) -> list[Ticket]:
        return [t for t in self._tickets.values() if t.running]

    def retry_after_s(self) -> int:
        """Predicted seconds until a running request finishes and frees its slot.

        With L requests running, each at the predicted speed f(L), request i
        still has ``r_i = max(tokens_i - done_i, 1)`` tokens to generate, where
        ``done_i`` is what the relay has counted for a stream, or
        ``elapsed_i * f(L)`` for a non-streaming request. The first slot frees at
        ``min_i r_i / f(L)``; the answer is that, rounded up and kept within
        [1, 120] seconds (1 when nothing runs).
        """
        running = self.running()
        if not running:
            return RETRY_AFTER_MIN_S
        now = self.now()
        speed = self.scheduler.predicted_speed(len(running))
        remaining = min(
            max(
                t.req.tokens
                - (t.tokens_out if t.streaming else (now - (t.admitted_at or now)) * speed),
                1.0,
            )
            for t in running
        )
        return int(min(max(math.ceil(remaining / speed), RETRY_AFTER_MIN_S), RETRY_AFTER_MAX_S))
