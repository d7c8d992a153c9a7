"""The admission core: two-tier queues and the paper's Algorithm 1, closed-loop. Pure.

Every public method takes ``now`` from its caller and returns decisions; there
is no clock, no I/O and no asyncio here, so the gateway (wall clock) and the
simulator (virtual clock) drive the very same object.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from saber.config import TaskType
from saber.scheduler._lengths import TaskLengths
from saber.scheduler._outcome import Outcome
from saber.scheduler._policy import Policy
from saber.scheduler._queues import TaskQueues
from saber.scheduler._request import MAX_TOKENS, Action, Decision, SchedRequest, Tier

SpeedFn = Callable[[float], float]
TTFTFn = Callable[[float, float], float]
"""Time to first token (s) of a request with this many prompt tokens at this load."""

CALIBRATION_ALPHA = 0.1
"""Weight of each finished request in the calibration's moving average: about the
last 20 requests count. Measured: 0.05-0.15 give the same goodput; 0.2 overreacts
to a few short requests under overload (docs/bench.md)."""
CALIBRATION_LIMITS = (0.1, 10.0)
REBUILD_AT = 0.1
"""Demotion and expiry times are recomputed when the calibrated f(1) has fallen this
much since they were (they come due later than they should). A rise needs nothing:
each time is checked again, at the calibration of the moment, when it comes due."""
_FREE_GRID = np.concatenate(([0.0], np.geomspace(0.005, 3600.0, 160)))
"""The times (s) at which ``time_to_free`` weighs the chance that a slot has freed."""
PACE_MIN_TOKENS = 8
PACE_MIN_S = 0.2
"""A streaming request's own pace is trusted from this many tokens and seconds on."""
OBSERVATIONS = 4096


@dataclass(frozen=True, slots=True)
class Observation:
    """A finished request as the speed model sees it: its time-averaged load, its
    speed (tokens over time since admission), and what the curve in use expected of
    it: ``expected`` is the curve's mean over the loads the request ran at, and
    ``predicted`` the same, calibrated. Not f of the mean load: under a load that
    moves during a request, that is biased (f is convex), by 20-45% on llama.cpp
    overloaded, where the curve's mean was right within 4%."""

    at: float
    load: float
    speed: float
    expected: float
    predicted: float


class Scheduler:
    """SABER's admission control over per-task high- and low-priority queues.

    A request arrives (``offer``) in its task's HPQ. It is admitted when f(L+1)
    meets its required speed (tokens over time left) and the policy's protection
    of running requests allows; it is demoted to its task's LPQ when its required
    speed passes f(1), the fastest the backend ever goes; it expires (is rejected)
    when, even at f(1), it could no longer finish within its task's ``useful_s``.

    Closed loop (beyond the paper, each a ``Policy`` knob): ``progress`` reports a
    running request's generated tokens; ``finish`` reports its length, which
    teaches the task's expected length (``learn_lengths``: ``lengths``, which
    ``request_for`` reads for each new request) and, against the
    speed the model predicted for it, the calibration of f(L) (``calibrate``).
    Finished requests also yield ``observations`` for refitting f(L) itself
    (``set_speed_model``), which the driver does off the hot path.

    Without live progress the scheduler estimates it with a token clock that
    advances by f(L) per second while the load is L: a request admitted when the
    clock read c has made about clock - c tokens.

    A task with a TTFT SLA (CATO) is judged on its first token: it is admitted
    while ``ttft(prompt tokens, L + 1)`` still lands before its deadline and, if
    the task has a ``useful_s``, its whole answer can still be made by then at
    f(L + 1) (the first token is cheap; the rest still takes the engine's time, so
    this keeps a flood of completions from running the load up). It is demoted when
    even ``ttft(P, 1)`` would miss, and never protected. ``ttft`` is the profile's
    fit; without one, one token at f(L) stands in for it.
    """

    def __init__(
        self,
        speed: SpeedFn,
        policy: Policy | None = None,
        *,
        tasks: Mapping[str, TaskType] | Iterable[TaskType] = (),
        ttft: TTFTFn | None = None,
        seed: int = 0,
    ) -> None:
        self.policy = policy or Policy()
        self._ttft_fn = ttft
        self._kinds: dict[str, str] = {}  # task -> the SLA kind its requests carry
        task_list = list(tasks.values()) if isinstance(tasks, Mapping) else list(tasks)
        self.tasks: dict[str, TaskType] = {t.name: t for t in task_list}
        self.lengths = TaskLengths(task_list, learn=self.policy.learn_lengths)
        self._rng = random.Random(seed)
        self._hpq = TaskQueues()
        self._lpq = TaskQueues()
        self._running: dict[str, SchedRequest] = {}
        self._high_running = 0
        # Lazy min-heaps: stale entries are skipped when they surface.
        self._demote_at: list[tuple[float, str]] = []
        self._expire_at: list[tuple[float, str]] = []
        self._protect: list[tuple[float, str]] = []  # (-required speed, id) of running HPQ requests
        # The token clock (tokens one request makes at the raw f(L)) and the load
        # clock (the integral of L), both since the start.
        self._clock = 0.0
        self._area = 0.0
        self._clock_at: float | None = None
        self._at_admit: dict[str, tuple[float, float]] = {}  # id -> (clock, area)
        self._last_protected = 0.0
        self._lapse_at: float | None = None  # when a blocking protection next ends
        self.calibration = 1.0
        self.observations: deque[Observation] = deque(maxlen=OBSERVATIONS)
        self.recent: deque[Decision] = deque(maxlen=100)
        self.set_speed_model(speed)

    # -- the speed model -------------------------------------------------

    def set_speed_model(self, speed: SpeedFn) -> None:
        """Swap f(L), e.g. after a refit: the calibration starts again from 1 and the
        demotion and expiry times are recomputed."""
        f1 = float(speed(1.0))
        if not f1 > 0:
            raise ValueError(f"the speed model predicts f(1) = {f1}; it must be > 0")
        self._speed = speed
        self._f_at: dict[int, float] = {}
        self._f1_raw = f1
        self.calibration = 1.0
        self._rebuild_times()

    def reconfigure(
        self,
        tasks: Mapping[str, TaskType],
        *,
        max_concurrency: int | None,
        queue_cap: int | None,
    ) -> None:
        """New task types and caps (a reload). Requests already here keep the deadline
        they arrived with; useful_s changes their expiry; a task type that is gone
        still drains from the queues. Call ``poll`` next: a higher cap may admit."""
        for task in tasks.values():
            self.lengths.add(task)
        self.tasks = {**self.tasks, **tasks}
        self.policy = dataclasses.replace(
            self.policy, max_concurrency=max_concurrency, queue_cap=queue_cap
        )
        self._rebuild_times()

    def set_ttft(self, ttft: TTFTFn | None) -> None:
        """Swap the TTFT fit (a reload brought another profile)."""
        self._ttft_fn = ttft
        self._rebuild_times()

    def set_calibration(self, value: float) -> None:
        """Restore a calibration learned before (a restart); kept within its limits."""
        low, high = CALIBRATION_LIMITS
        self.calibration = min(max(float(value), low), high)
        self._rebuild_times()

    @property
    def speed_model(self) -> SpeedFn:
        return self._speed

    def predicted_speed(self, load: float) -> float:
        """f(L), calibrated: what one request is expected to get at load L."""
        return self.calibration * float(self._speed(max(1.0, load)))

    def _f(self, load: int) -> float:
        """The raw f at an integer load, cached: the value rule asks for many loads."""
        speed = self._f_at.get(load)
        if speed is None:
            speed = self._f_at[load] = float(self._speed(max(1.0, load)))
        return speed

    @property
    def max_speed(self) -> float:
        """f(1), calibrated: the fastest the backend can serve one request."""
        return self.calibration * self._f1_raw

    def _demotion_time(self, req: SchedRequest) -> float:
        if req.sla_kind == "ttft":
            return req.deadline - self._ttft(req.task, 1)
        # required speed tokens / (deadline - t) reaches f(1) at this t.
        return req.deadline - req.tokens / self.max_speed

    def _ttft(self, task: str, load: int) -> float:
        """Predicted time to first token of a request of ``task`` at ``load``."""
        if self._ttft_fn is None:
            return 1.0 / self.predicted_speed(load)
        known = self.tasks.get(task)
        prompt = known.mean_input_tokens if known is not None else 0
        return float(self._ttft_fn(prompt, load))

    def _earliest_deadline(self, task: str, tokens: int, now: float, speed: float) -> float:
        """The earliest deadline with which a request of ``task`` expecting ``tokens``
        can be admitted now, at per-request speed ``speed`` (that of L + 1)."""
        if self._kinds.get(task) != "ttft":
            return now + tokens / speed
        first = now + self._ttft(task, self.load + 1)
        known = self.tasks.get(task)
        if known is None or known.useful_s is None:
            return first
        # The whole answer by arrival + useful_s, i.e. by deadline + (useful_s - sla_s).
        return max(first, now + tokens / speed - (known.useful_s - known.sla_s))

    def _passes(self, req: SchedRequest, now: float, speed: float) -> bool:
        """Line 10's first half: the newcomer itself can make its deadline at L + 1."""
        if req.sla_kind == "ttft":
            return req.deadline >= self._earliest_deadline(req.task, req.tokens, now, speed)
        return speed >= req.required_speed_at(now)

    def _expiry_time(self, req: SchedRequest) -> float | None:
        task = self.tasks.get(req.task)
        if task is None or task.useful_s is None:
            return None
        return req.arrival + task.useful_s - req.tokens / self.max_speed

    def _rebuild_times(self) -> None:
        self._times_f1 = self.max_speed
        self._demote_at = [(self._demotion_time(r), r.id) for r in self._hpq]
        heapq.heapify(self._demote_at)
        self._expire_at = [
            (t, r.id) for r in self._waiting() if (t := self._expiry_time(r)) is not None
        ]
        heapq.heapify(self._expire_at)

    # -- state -----------------------------------------------------------

    @property
    def load(self) -> int:
        """Requests admitted and not yet finished: the L of f(L)."""
        return len(self._running)

    def queued(self, task: str | None = None, tier: Tier | None = None) -> int:
        queues = [self._hpq, self._lpq] if tier is None else [self._queue(tier)]
        if task is None:
            return sum(len(q) for q in queues)
        return sum(q.depth(task) for q in queues)

    def is_running(self, req_id: str) -> bool:
        return req_id in self._running

    def is_queued(self, req_id: str) -> bool:
        return req_id in self._hpq or req_id in self._lpq

    def running(self) -> list[SchedRequest]:
        return list(self._running.values())

    def _queue(self, tier: Tier) -> TaskQueues:
        return self._hpq if tier is Tier.HIGH else self._lpq

    def _waiting(self) -> Iterable[SchedRequest]:
        yield from self._hpq
        yield from self._lpq

    # -- events ----------------------------------------------------------

    def offer(self, req: SchedRequest, now: float) -> list[Decision]:
        """A request arrives. Returns what happened to it and to any other."""
        if self.is_queued(req.id) or req.id in self._running:
            raise ValueError(f"request {req.id} is already known to the scheduler")
        demote_at = self._demotion_time(req)  # may raise: before any state changes
        expire_at = self._expiry_time(req)
        self._tick(now)
        cap = self.policy.queue_cap
        if cap is not None and self.queued(req.task) >= cap:
            rejected = self._leave_queued(req, now, Outcome.REJECTED_QUEUE_FULL)
            self.recent.append(rejected)
            return [rejected, *self.poll(now)]
        self._kinds[req.task] = req.sla_kind
        self._hpq.push(req)
        heapq.heappush(self._demote_at, (demote_at, req.id))
        if expire_at is not None:
            heapq.heappush(self._expire_at, (expire_at, req.id))
        return self.poll(now)

    def poll(self, now: float) -> list[Decision]:
        """Demote what can no longer make its deadline, reject what can no longer be
        useful, then admit whatever the policy allows at ``now``."""
        self._tick(now)
        out = self._demote_due(now)
        out += self._expire_due(now)
        out += self._admit(now)
        self.recent.extend(out)
        return out

    def progress(self, req_id: str, tokens: int, now: float) -> None:
        """A running request has generated ``tokens`` so far (a stream's count).
        Cheap enough for every frame; a count that goes backwards is ignored."""
        req = self._running.get(req_id)
        if req is not None and (req.generated is None or tokens > req.generated):
            req.generated = tokens
            if tokens > 0 and req.first_token_at is None:
                req.first_token_at = now

    def finish(self, req_id: str, now: float, tokens: int | None = None) -> Outcome | None:
        """A running request completed, having generated ``tokens`` (None: not
        known). Returns None if it was not running, so a caller that reports twice
        releases the slot only once."""
        req = self._running.get(req_id)
        if req is None:
            return None
        if tokens is None:
            tokens = req.generated
        if tokens:
            self._learn(req, now, tokens)
        self._release(req_id, now)
        req.outcome = Outcome.SERVED if req.tier is Tier.HIGH else Outcome.SERVED_DEMOTED
        return req.outcome

    def cancel(self, req_id: str, now: float) -> Outcome | None:
        """The request leaves unfinished (the client went away, the backend failed it):
        out of its queue, or out of its running slot. Returns None if it was neither."""
        req = self._hpq.remove(req_id) or self._lpq.remove(req_id)
        if req is not None:
            req.outcome = Outcome.CANCELLED_QUEUED
            return req.outcome
        req = self._release(req_id, now)
        if req is not None:
            req.outcome = Outcome.CANCELLED_RUNNING
            return req.outcome
        return None

    def next_wakeup(self) -> float | None:
        """The next time ``poll`` has work even if no request arrives or ends: the
        earliest demotion or expiry of a waiting request; with progress-aware
        protection, also when a running request that holds the queue back is
        expected to stop needing protection."""
        lapse = self._lapse_at if self.queued() else None
        times = [
            t
            for t in (
                self._peek(self._demote_at, self._hpq.__contains__),
                self._peek(self._expire_at, self.is_queued),
                lapse,
            )
            if t is not None
        ]
        return min(times) if times else None

    # -- learning from what finished (beyond the paper) -----------------

    def _learn(self, req: SchedRequest, now: float, tokens: int) -> None:
        self._tick(now)
        self.lengths.observe(req.task, tokens)
        clock, area = self._at_admit[req.id]
        took = now - (req.admitted_at if req.admitted_at is not None else now)
        raw = self._clock - clock  # tokens the raw f(L) predicted over its run
        if took <= 0 or raw <= 0:
            return
        load = max((self._area - area) / took, 1.0)
        speed = tokens / took
        expected = raw / took
        self.observations.append(
            Observation(now, load, speed, expected, self.calibration * expected)
        )
        if self.policy.calibrate:
            low, high = CALIBRATION_LIMITS
            sample = tokens / raw
            cal = self.calibration + CALIBRATION_ALPHA * (sample - self.calibration)
            self.calibration = min(max(cal, low), high)
            if self.max_speed < (1.0 - REBUILD_AT) * self._times_f1:
                self._rebuild_times()

    # -- the token and load clocks --------------------------------------

    def _tick(self, now: float) -> None:
        """Advance the clocks to ``now`` at the load that held since the last event."""
        if self._clock_at is not None and now > self._clock_at and self._running:
            dt = now - self._clock_at
            self._clock += self._f(len(self._running)) * dt
            self._area += len(self._running) * dt
        if self._clock_at is None or now > self._clock_at:
            self._clock_at = now

    def _release(self, req_id: str, now: float) -> SchedRequest | None:
        if req_id not in self._running:
            return None
        try:
            self._tick(now)
        finally:  # the slot is freed whatever the speed model does
            self._at_admit.pop(req_id, None)
            req = self._running.pop(req_id)
            if req.tier is Tier.HIGH:
                self._high_running -= 1
        return req

    def _left(self, req: SchedRequest, now: float) -> float:
        """Tokens a running request still has to generate: from its streamed count when
        the relay reports one, else from the token clock."""
        if req.generated is not None:
            return self.lengths.remaining(req.task, req.generated, req.cap, req.tokens)
        return req.tokens - self._made(req, now)

    def _made(self, req: SchedRequest, now: float) -> float:
        """Tokens a running request that reports nothing has made by ``now``, by the
        token clock (calibrated)."""
        made = self._clock - self._at_admit[req.id][0]
        if self._clock_at is not None and now > self._clock_at:
            made += self._f(len(self._running)) * (now - self._clock_at)
        return self.calibration * made

    def time_to_free(self, now: float, q: float = 0.5) -> float | None:
        """Seconds from ``now`` by which a running request has finished and freed its
        slot, with probability ``q``; None when nothing runs.

        Each running request still has tokens to make: how many is uncertain, given
        what it has made so far (learned lengths: the distribution whose mean is
        ``lengths.remaining``; a request that has run past the mean is likely a long
        one), and it makes them at its own pace since its first token when it
        streams, else at f(L), with what it has made read off the token clock. The
        first slot frees when the soonest of them ends: the ``q``-quantile of that
        minimum. Without learned lengths, each request's expected remainder is
        taken as certain.
        """
        if not self._running:
            return None
        speed = self.predicted_speed(self.load)
        by_task: dict[str, list[tuple[float, float, float, float]]] = {}
        for req in self._running.values():
            if req.generated is not None:
                made = float(req.generated)
                pace = self._pace(req, now) or speed
            else:
                made = float(max(int(self._made(req, now)), 0))
                pace = speed
            cap = float(req.cap) if req.cap else float(MAX_TOKENS)
            left = self.lengths.remaining(req.task, int(made), req.cap, req.tokens)
            by_task.setdefault(req.task, []).append((made, cap, pace, left))
        certain = np.inf  # the soonest certain end: a remainder taken as certain, or a cap
        alive = np.ones_like(_FREE_GRID)  # P(no uncertain one has ended by each grid time)
        for task, rows in by_task.items():
            arr = np.array(rows, dtype=float)
            made_a, cap_a, pace_a, left_a = (arr[:, i : i + 1] for i in range(4))
            est = self.lengths.estimate(task)
            if est is None:
                certain = min(certain, float(np.min(np.maximum(left_a, 0.0) / pace_a)))
            else:
                alive *= np.prod(est.survival(made_a, cap_a, _FREE_GRID * pace_a), axis=0)
                # It has ended by its cap at the latest.
                certain = min(certain, float(np.min((cap_a - made_a) / pace_a)))
        crossed = np.flatnonzero(alive <= 1.0 - q)
        if not crossed.size:
            return min(certain, float(_FREE_GRID[-1]))
        k = int(crossed[0])
        if k == 0:
            return min(certain, float(_FREE_GRID[0]))
        # Linear between the two grid times around the crossing.
        t0, t1, a0, a1 = _FREE_GRID[k - 1], _FREE_GRID[k], alive[k - 1], alive[k]
        frac = (a0 - (1.0 - q)) / (a0 - a1) if a0 > a1 else 1.0
        return min(certain, float(t0 + frac * (t1 - t0)))

    @staticmethod
    def _pace(req: SchedRequest, now: float) -> float | None:
        """Tokens per second a streaming request has made since its first token; None
        until it has run long enough to tell (PACE_MIN_TOKENS, PACE_MIN_S)."""
        if req.first_token_at is None or req.generated is None:
            return None
        elapsed = now - req.first_token_at
        if req.generated < PACE_MIN_TOKENS or elapsed < PACE_MIN_S:
            return None
        return (req.generated - 1) / elapsed

    def _still_needs(self, req: SchedRequest, now: float) -> float:
        """The speed a running HPQ request still needs, from its progress.

        0 when it no longer needs protecting: expected to be done already, past its
        deadline, or needing more than f(1), which no admission decision can give it;
        always 0 with a TTFT SLA.
        """
        if req.sla_kind == "ttft":
            return 0.0
        left = self._left(req, now)
        remaining = req.deadline - now
        if left <= 0 or remaining <= 0:
            return 0.0
        need = left / remaining
        return need if need <= self.max_speed else 0.0

    # -- Algorithm 1 -----------------------------------------------------

    def _admit(self, now: float) -> list[Decision]:
        out: list[Decision] = []
        cap = self.policy.max_concurrency
        protected = self._protected_speed_at(now)
        while len(self._hpq) and (cap is None or self.load < cap):
            decision = self._admit_one_from_hpq(now, protected)
            if decision is None:
                break  # nothing passes: wait for the next event
            out.append(decision)
            if self.policy.protection != "none":
                protected = max(protected, decision.request.required_speed or 0.0)
        self._last_protected = protected
        if not len(self._hpq):
            out += self._admit_low(now, protected)
        lapses = self.policy.protection in ("progress", "value")
        self._lapse_at = self._next_lapse(now) if lapses else None
        return out

    def _admit_one_from_hpq(self, now: float, protected: float) -> Decision | None:
        predicted = self.predicted_speed(self.load + 1)  # f(curLoad + 1)
        if predicted < protected:
            return None  # admitting anyone would break a running request's SLA
        if self.policy.order == "deadline":
            req = self._hpq.most_urgent_passing(
                lambda task, tokens: self._earliest_deadline(task, tokens, now, predicted)
            )
            if req is None:
                return None
            self._hpq.remove(req.id)
            return self._start(req, now, Tier.HIGH)
        window = self._hpq.front(self.policy.window_size)
        self._rng.shuffle(window)  # RandomSample(HPQ, windowSize)
        for req in window:
            if self._passes(req, now, predicted):
                self._hpq.remove(req.id)
                return self._start(req, now, Tier.HIGH)
        return None

    def _admit_low(self, now: float, protected: float) -> list[Decision]:
        """Best effort for demoted requests, oldest first, when the policy allows."""
        mode, cap = self.policy.lpq, self.policy.max_concurrency
        out: list[Decision] = []
        if mode == "idle":
            if self._high_running:
                return out
            headroom = self._fresh_need()
        while len(self._lpq) and (cap is None or self.load < cap):
            if mode == "guard" and self.predicted_speed(self.load + 1) < protected:
                break
            if mode == "idle" and self.predicted_speed(self.load + 2) < headroom:
                break
            req = self._lpq.popleft()
            assert req is not None
            out.append(self._start(req, now, Tier.LOW))
        return out

    def _fresh_need(self) -> float:
        """The highest speed a new arrival of any known task needs: expected tokens
        over its SLA. Best-effort work keeps the load where it can still be met."""
        return max(
            (
                self.lengths.expected(t, None) / t.sla_s
                for t in self.tasks.values()
                if t.sla_kind == "e2e"
            ),
            default=0.0,
        )

    def _next_lapse(self, now: float) -> float | None:
        """The earliest time a running request's protection ends at the current load:
        expected done, at its deadline, or needing more than f(1). Only needed while
        something waits; without it a quiet gateway would notice only at the next event."""
        if not self.queued():
            return None
        speed, f1 = self.predicted_speed(self.load), self.max_speed
        soonest = None
        for req in self._running.values():
            if req.tier is not Tier.HIGH or self._still_needs(req, now) <= 0:
                continue
            left = self._left(req, now)
            remaining = req.deadline - now
            dt = min(left / speed, remaining) if speed > 0 else remaining
            if f1 > speed:
                dt = min(dt, (f1 * remaining - left) / (f1 - speed))
            at = now + dt + 1e-6  # just past it, so the poll then sees it lapsed
            if dt >= 0 and (soonest is None or at < soonest):
                soonest = at
        return soonest

    def _protected_speed(self) -> float:
        """The highest required speed among running requests admitted from the HPQ."""
        heap = self._protect
        while heap and heap[0][1] not in self._running:
            heapq.heappop(heap)
        if len(heap) > 2 * len(self._running) + 64:
            # Finished entries below a long-lived top are never popped: rebuild, so a
            # gateway that runs for weeks keeps the heap the size of its load.
            heap[:] = [e for e in heap if e[1] in self._running]
            heapq.heapify(heap)
        return -heap[0][0] if heap else 0.0

    def _protected_speed_at(self, now: float) -> float:
        """The speed f(L+1) must meet for anyone to be admitted, per the policy."""
        mode = self.policy.protection
        if mode == "none":
            return 0.0
        if mode == "frozen":
            return self._protected_speed()
        needs = sorted(
            n
            for n in (
                self._still_needs(r, now) for r in self._running.values() if r.tier is Tier.HIGH
            )
            if n > 0
        )
        if not needs:
            return 0.0
        if mode == "progress":
            return needs[-1]
        speed = self.predicted_speed(self._best_load(now, needs))
        kept = bisect.bisect_right(needs, speed)
        return needs[kept - 1] if kept else 0.0

    def _best_load(self, now: float, needs: list[float]) -> int:
        """The load n >= L that keeps the most requests on schedule: running ones with
        need <= f(n), plus up to n - L waiting ones with required speed <= f(n). Ties
        go to the lowest n, so protection yields only to a strictly larger gain."""
        load, f1 = self.load, self.max_speed
        waiting = sorted(s for s in (r.required_speed_at(now) for r in self._hpq) if s <= f1)
        cap = self.policy.max_concurrency
        top = load + len(waiting)
        if cap is not None:
            top = min(top, cap)
        best, best_value = load, bisect.bisect_right(needs, self.predicted_speed(load))
        for n in range(load + 1, top + 1):
            speed = self.predicted_speed(n)
            kept = bisect.bisect_right(needs, speed)
            served = bisect.bisect_right(waiting, speed)
            if kept + served <= best_value:
                break  # f only falls with n: no larger n can do better
            value = kept + min(n - load, served)
            if value > best_value:
                best, best_value = n, value
        return best

    def _start(self, req: SchedRequest, now: float, tier: Tier) -> Decision:
        req.admitted_at = now
        self._running[req.id] = req
        self._at_admit[req.id] = (self._clock, self._area)
        if tier is Tier.HIGH:
            self._high_running += 1
            # Recorded once, as the paper does: what this request needs from now on.
            req.required_speed = req.required_speed_at(now)
            heapq.heappush(self._protect, (-req.required_speed, req.id))
        return Decision(Action.ADMIT, req, now, tier)

    def _demote_due(self, now: float) -> list[Decision]:
        out = []
        heap = self._demote_at
        while heap and heap[0][0] <= now:
            _, req_id = heapq.heappop(heap)
            req = self._hpq.get(req_id)
            if req is None:
                continue  # already admitted or cancelled
            due = self._demotion_time(req)
            if due > now:  # the calibration rose since: not yet
                heapq.heappush(heap, (due, req_id))
                continue
            self._hpq.remove(req_id)
            req.tier = Tier.LOW
            req.demoted_at = now
            self._lpq.push(req)
            out.append(Decision(Action.DEMOTE, req, now, Tier.LOW))
        return out

    def _expire_due(self, now: float) -> list[Decision]:
        out = []
        heap = self._expire_at
        while heap and heap[0][0] <= now:
            _, req_id = heapq.heappop(heap)
            req = self._hpq.get(req_id) or self._lpq.get(req_id)
            if req is None:
                continue
            due = self._expiry_time(req)
            if due is not None and due > now:  # the calibration rose since: not yet
                heapq.heappush(heap, (due, req_id))
                continue
            self._hpq.remove(req_id) or self._lpq.remove(req_id)
            out.append(self._leave_queued(req, now, Outcome.REJECTED_EXPIRED))
        return out

    def _leave_queued(self, req: SchedRequest, now: float, outcome: Outcome) -> Decision:
        req.outcome = outcome
        return Decision(Action.REJECT, req, now, req.tier, outcome)

    @staticmethod
    def _peek(heap: list[tuple[float, str]], member: Callable[[str], bool]) -> float | None:
        while heap and not member(heap[0][1]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    # -- introspection ---------------------------------------------------

    def snapshot(self, tasks: Iterable[str] = ()) -> dict[str, Any]:
        """A JSON-ready picture of the queues, the load and the speed model."""
        names = sorted({*tasks, *self._hpq.tasks(), *self._lpq.tasks()})
        load = self.load
        return {
            "load": load,
            "max_concurrency": self.policy.max_concurrency,
            "window_size": self.policy.window_size,
            "predicted_speed": {
                "at_load": self.predicted_speed(load),
                "at_load_plus_1": self.predicted_speed(load + 1),
                "max": self.max_speed,
            },
            "calibration": round(self.calibration, 4),
            "protected_speed": (
                self._protected_speed()
                if self.policy.protection == "frozen"
                else self._last_protected
            ),
            "queues": {
                name: {"high": self._hpq.depth(name), "low": self._lpq.depth(name)}
                for name in names
            },
            "lengths": self.lengths.summary(),
            "recent_decisions": [
                {
                    "action": d.action.value,
                    "id": d.request.id,
                    "task": d.request.task,
                    "tier": d.tier.value,
                    "at": d.at,
                    **({"outcome": d.outcome.value} if d.outcome else {}),
                    **(
                        {"required_speed": round(d.request.required_speed, 3)}
                        if d.action is Action.ADMIT and d.request.required_speed is not None
                        else {}
                    ),
                }
                for d in list(self.recent)[-20:]
            ],
        }
