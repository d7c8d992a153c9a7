"""Drives the pure scheduler from asyncio: futures, events, one timer.

Every event (an arrival, a request leaving) calls the scheduler, applies the
decisions it returns, and re-arms the single timer at ``next_wakeup()``: the next
moment a queued request must be demoted or an LPQ entry expires. Nothing polls.

The scheduler's clock is the event loop's (``loop.time()``, monotonic seconds),
and so is every time the gateway measures a request by: one clock.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.scheduler import Action, Decision, Outcome, Placed, Pool, SchedRequest, Scheduler

log = logging.getLogger(GATEWAY_LOGGER)

MAX_PROBES = 1024
RETRY_AFTER_REUSE_S = 0.1
"""A prediction is reused, less the time gone by, for this long: a flood of refusals
costs one computation (about 2 ms at 256 running, 10 ms at 1,024) per this many seconds."""
RETRY_AFTER_MAX_S = 59
"""The longest wait advised: the AI SDK (Cline) honours a Retry-After only below 60 s
and falls back to its own 2 s and 4 s otherwise; openai-python up to 120 s."""
RETRY_AFTER_QUANTILE = 0.8
"""Retry-After is when a slot has freed with this chance (``Scheduler.time_to_free``).
Measured in virtual time (bench/retry_after.py, with the margin below): 87-96% of
clients retrying at retry-after-ms find a slot freed, a median of 0.5-1.3 s after it
did; the median prediction (0.5) is about right, observed over predicted 0.94-1.01 at
the median with 2 or 4 slots."""
RETRY_AFTER_MARGIN_S = 0.25
"""Added to the prediction: the slot's last token still has to reach the gateway, and
the scheduler to admit what waits, before a retry finds room (tests/gateway/
test_client_retries.py: without it, clients came back 0.1-0.3 s early)."""
RETRY_AFTER_MIN_MS = 250
"""No sooner: a retry is not spent on a slot due to free in a few milliseconds."""


def retry_after(predicted_s: float | None) -> tuple[int, int]:
    """The Retry-After (whole seconds, rounded up, 1 to RETRY_AFTER_MAX_S) and
    retry-after-ms (RETRY_AFTER_MIN_MS to the same bound) for a slot predicted to
    free in ``predicted_s`` seconds (None: nothing runs, so at once), RETRY_AFTER_MARGIN_S
    later."""
    wait = 0.0 if predicted_s is None else max(predicted_s, 0.0) + RETRY_AFTER_MARGIN_S
    wait = min(wait, float(RETRY_AFTER_MAX_S))
    ms = min(max(math.ceil(wait * 1000.0), RETRY_AFTER_MIN_MS), RETRY_AFTER_MAX_S * 1000)
    return max(math.ceil(wait), 1), ms


@dataclass(slots=True)
class TraceEntry:
    """One call into the scheduler, so that a test can replay it on a fresh one."""

    call: str
    now: float
    arg: SchedRequest | str | None = None
    decisions: list[Decision] = field(default_factory=list)


class Admission:
    """The gateway's only door to the scheduler: the pool of its backends' schedulers.

    It knows the requests it has offered and not yet seen leave (``active``) and the
    future each queued one waits on; where a request is (queued, running, let go, and
    on which backend) it asks the pool.
    """

    def __init__(
        self,
        scheduler: Pool | Scheduler,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        on_finish: Callable[[], None] | None = None,
        on_slot_free: Callable[[float, float], None] | None = None,
        trace: bool = False,
    ) -> None:
        self.pool = scheduler if isinstance(scheduler, Pool) else Pool([scheduler])
        self.on_decision = on_decision  # called with every decision, before it is applied
        self.on_finish = on_finish  # called after a request finished (it taught the scheduler)
        # Called with (predicted, observed) seconds to a free slot, for each Retry-After
        # given since the last slot freed, when the next one does.
        self.on_slot_free = on_slot_free
        self._probes: list[tuple[float, float]] = []  # (when, predicted) since the last
        self._last_prediction: tuple[float, float] | None = None  # (when, seconds)
        self._last_room: dict[str, tuple[float, float]] = {}  # task -> (when, seconds)
        # task -> (when, predicted) of each Retry-After for its full queue since it last
        # had room
        self._room_probes: dict[str, list[tuple[float, float]]] = {}
        self._loop = loop or asyncio.get_running_loop()
        self._requests: dict[str, SchedRequest] = {}  # offered, not yet gone
        self._waiting: dict[str, asyncio.Future[Decision]] = {}  # queued: ADMIT or REJECT
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

    def new_id(self) -> str:
        # Zero-padded, so that ids sort in arrival order when two arrive in one tick.
        return f"r{next(self._ids):09d}"

    # -- events -----------------------------------------------------------------------

    def offer(self, req: SchedRequest) -> asyncio.Future[Decision]:
        """Offer a new request. The future resolves with its ADMIT or REJECT, maybe at
        once, or with the exception that applying that decision raised. If the
        scheduler raises, nothing of the request is left behind."""
        now = self.now()
        decisions = self.pool.offer(req, now)
        future: asyncio.Future[Decision] = self._loop.create_future()
        self._requests[req.id] = req
        self._waiting[req.id] = future
        self._record("offer", now, req, decisions)
        return future

    def progress(self, req: SchedRequest, tokens: int) -> None:
        """A relay's count of the tokens ``req`` has generated so far, all its sequences
        together, each time it changes (``Flow.progress``): the one door through which
        a running request's progress reaches the scheduler (``Scheduler.progress``),
        which reads it as one sequence's (against its expected length and cap), so a
        request of several is reported by the mean of its sequences, rounded up."""
        if req.id in self._requests:
            per_seq = -(-tokens // req.seqs)
            self.pool.progress(req.id, per_seq, self.now())

    def leave(
        self,
        req: SchedRequest,
        *,
        served: bool,
        tokens: int | None = None,
        prompt: int | None = None,
    ) -> Outcome | None:
        """Take ``req`` out of the scheduler, wherever it is, then admit what that allows.

        Running, it finishes if ``served`` (having generated ``tokens``, its prompt
        counted as ``prompt`` tokens by the engine), else it is cancelled; queued, it is
        cancelled. Returns how the scheduler saw it leave, or None if the scheduler no
        longer held it (a REJECT had let it go).
        """
        self._forget(req.id)
        now = self.now()
        sched = self.pool
        running = sched.is_running(req.id)
        if served and running:
            call, outcome = "finish", sched.finish(req.id, now, tokens, prompt)
            if self.on_finish is not None:
                self.on_finish()
        elif running or sched.is_queued(req.id):
            if not running:
                self._room_made(req.task, now)
            call, outcome = "cancel", sched.cancel(req.id, now)
        else:
            return None
        if running:
            self._slot_freed(now)
        self._after_leaving(call, now, req.id)
        return outcome

    def drop(self, req: SchedRequest) -> None:
        """Free ``req``'s place after ``leave`` raised: cancelled if the scheduler still
        holds it, whatever else fails."""
        self._forget(req.id)
        now = self.now()
        running = self.pool.is_running(req.id)
        try:
            if self.pool.cancel(req.id, now) is None:
                return
        except Exception:
            # Its running slot is freed before the scheduler can fail (the token clock).
            log.exception("the scheduler failed to cancel a request", extra={"id": req.id})
        if running:
            self._slot_freed(now)
        self._after_leaving("cancel", now, req.id)

    def poke(self) -> None:
        """Poll the scheduler now (its settings changed: it may admit)."""
        self._record("poll", self.now(), None, self.pool.poll(self.now()))

    def close(self) -> None:
        """Stop the timer (at shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- internals --------------------------------------------------------------------

    def _forget(self, req_id: str) -> None:
        self._requests.pop(req_id, None)
        future = self._waiting.pop(req_id, None)
        if future is not None and not future.done():
            future.cancel()

    def _slot_freed(self, now: float) -> None:
        """A running request left: every Retry-After given since the last slot freed
        learns how long it really was."""
        probes, self._probes = self._probes, []
        self._last_prediction = None  # a slot freed: predict afresh
        self._last_room.clear()
        self._answer(probes, now)

    def _room_made(self, task: str, now: float) -> None:
        """A request of ``task`` left its queue: every Retry-After given since for its
        full queue learns how long it really was."""
        self._last_room.pop(task, None)
        self._answer(self._room_probes.pop(task, []), now)

    def _answer(self, probes: list[tuple[float, float]], now: float) -> None:
        """Each (when, predicted) of ``probes`` observed at ``now`` (``on_slot_free``)."""
        if self.on_slot_free is None:
            return
        for at, predicted in probes:
            try:
                self.on_slot_free(predicted, now - at)
            except Exception:
                log.exception("observing a Retry-After failed")

    def _after_leaving(self, call: str, now: float, req_id: str) -> None:
        if self.trace is not None:
            self.trace.append(TraceEntry(call, now, req_id))
        self._record("poll", now, None, self.pool.poll(now))

    def backend_of(self, req_id: str) -> int | None:
        """The backend (its index in the pool) a running request was placed on."""
        return self.pool.backend_of(req_id)

    def _record(
        self, call: str, now: float, arg: SchedRequest | None, placed: list[Placed]
    ) -> None:
        decisions = [p.decision for p in placed]
        if self.trace is not None:
            self.trace.append(TraceEntry(call, now, arg, list(decisions)))
        for d in decisions:
            self._apply(d)
        self._rearm()

    def _apply(self, d: Decision) -> None:
        """One decision: the request's future learns it. If applying it fails, the
        future carries the error instead, so that its own request ends, not another."""
        future = None if d.action is Action.DEMOTE else self._waiting.pop(d.request.id, None)
        if d.action is not Action.DEMOTE and d.outcome is not Outcome.REJECTED_QUEUE_FULL:
            self._room_made(d.request.task, d.at)  # it left its queue (admitted, expired)
        try:
            if self.on_decision is not None:
                self.on_decision(d)
            if d.action is Action.REJECT:  # the scheduler has already let it go
                self._requests.pop(d.request.id, None)
            if future is not None and not future.done():
                future.set_result(d)
        except Exception as exc:
            if future is None or future.done():
                log.exception("applying a scheduler decision failed", extra={"id": d.request.id})
            else:
                future.set_exception(exc)

    def _rearm(self) -> None:
        when = self.pool.next_wakeup()
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
        try:
            self._record("timer", now, None, self.pool.poll(now))
        except Exception:
            log.exception("the scheduler failed on its timer")
            self._rearm()

    # -- what the routes ask ----------------------------------------------------------

    @property
    def active(self) -> int:
        """Requests offered and not yet gone: queued or running."""
        return len(self._requests)

    def retry_after(self, full: str | None = None) -> tuple[int, int]:
        """When a client turned away now should come back: a slot is predicted to free
        in ``Scheduler.time_to_free`` seconds (running requests' live progress and
        expected remaining tokens). Returns (Retry-After in whole seconds,
        retry-after-ms); see ``retry_after``. Each answer is a probe that the next
        slot to free resolves (``on_slot_free``): the check of the prediction.

        ``full``: the client's task, whose queue was full. Its queue has room only once
        one of its own waiting requests is admitted, behind those due sooner: after
        as many slots have freed (``Pool.time_to_room``), not the first; its probe is
        answered when a request of that task next leaves its queue."""
        now = self.now()
        if full is None:
            last, probes = self._last_prediction, self._probes
        else:
            last, probes = self._last_room.get(full), self._room_probes.setdefault(full, [])
        if last is not None and now - last[0] < RETRY_AFTER_REUSE_S and self.pool.load:
            predicted: float | None = max(last[1] - (now - last[0]), 0.0)
        elif full is None:
            predicted = self.pool.time_to_free(now, RETRY_AFTER_QUANTILE)
            self._last_prediction = None if predicted is None else (now, predicted)
        else:
            predicted = self.pool.time_to_room(full, now, RETRY_AFTER_QUANTILE)
            if predicted is not None:
                self._last_room[full] = (now, predicted)
        if predicted is not None:
            if len(probes) >= MAX_PROBES:
                probes.pop(0)
            probes.append((now, predicted))
        return retry_after(predicted)
