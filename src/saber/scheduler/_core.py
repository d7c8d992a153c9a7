"""The admission core: two-tier queues and the paper's Algorithm 1, closed-loop. Pure.

Every public method takes ``now`` from its caller and returns decisions; there
is no clock, no I/O and no asyncio here, so the gateway (wall clock) and the
simulator (virtual clock) drive the very same object.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from saber.config import TaskType
from saber.scheduler._arrivals import Arrivals
from saber.scheduler._calibration import Calibration, Observation
from saber.scheduler._chance import Needs, rounded_sigma, running_chance
from saber.scheduler._lengths import TaskLengths
from saber.scheduler._outcome import Outcome
from saber.scheduler._policy import Policy
from saber.scheduler._queues import TaskQueues
from saber.scheduler._request import MAX_TOKENS, Action, Decision, Kind, SchedRequest, Tier

SpeedFn = Callable[[float], float]
TTFTFn = Callable[[float, float], float]
"""Time to first token (s) of a request with this many prompt tokens at this load."""

REBUILD_AT = 0.1
"""Demotion and expiry times are recomputed when the calibrated f(1) has fallen this
much since they were, or what a task's requests need has grown this much (they come
due later than they should). A change the other way needs nothing: each time is
checked again, at the state of the moment, when it comes due."""
_FREE_GRID = np.concatenate(([0.0], np.geomspace(0.005, 3600.0, 160)))
"""The times (s) at which ``time_to_free`` weighs the chance that a slot has freed."""
PACE_MIN_TOKENS = 8
PACE_MIN_S = 0.2
"""A streaming request's own pace is trusted from this many tokens and seconds on."""
CHANCE_STEP = 0.02
"""The admission threshold is rounded up to this, so its quantiles are cached."""

__all__ = ["Observation", "Scheduler", "SpeedFn", "TTFTFn"]


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
        speed_sigma: float | None = None,
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
        self._load = 0  # sequences running: the sum of their seqs
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
        # speed_sigma: the profile's own error (relative), the spread's prior.
        self._cal = Calibration(enabled=self.policy.calibrate, sigma=speed_sigma)
        self._sigma = rounded_sigma(self._cal.sigma)
        self.needs = Needs()
        self._built_needs: dict[Kind, float] = {}  # kind -> need when timed
        self._arrivals = Arrivals()
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
        self._cal.restart()
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
        self.needs.forget()
        self._rebuild_times()

    def set_ttft(self, ttft: TTFTFn | None) -> None:
        """Swap the TTFT fit (a reload brought another profile)."""
        self._ttft_fn = ttft
        self._rebuild_times()

    def set_calibration(self, value: float) -> None:
        """Restore a calibration learned before (a restart); kept within its limits."""
        self._cal.set(value)
        self._rebuild_times()

    @property
    def calibration(self) -> float:
        """What f(L) is scaled by: observed over predicted speed (1 without
        ``calibrate``)."""
        return self._cal.value if self.policy.calibrate else 1.0

    @property
    def speed_sigma(self) -> float:
        """How far one request's speed strays from the prediction (std of its log)."""
        return self._cal.sigma

    @property
    def observations(self) -> deque[Observation]:
        return self._cal.observations

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
        """f(1), calibrated: the fastest the backend can serve one request. Never below
        the fastest request seen lately (no request runs faster than a lone one), so
        an engine that seemed slow while busy is not predicted too slow when idle."""
        return max(self.calibration * self._f1_raw, self._cal.fastest)

    def _demotion_time(self, req: SchedRequest) -> float:
        if req.sla_kind == "ttft":
            return req.deadline - self._ttft(req.task, 1)
        if self.policy.decide == "chance":
            # The chance at f(1) falls below demote_below at this t.
            return req.deadline - self._need(req, self.policy.demote_below) / self.max_speed
        # required speed tokens / (deadline - t) reaches f(1) at this t.
        return req.deadline - req.tokens / self.max_speed

    def _need(self, req: SchedRequest, p: float) -> float:
        """The work (tokens at the predicted speed) ``req`` needs to finish in time with
        chance ``p``: a quantile of its effective length (``saber.scheduler._chance``)."""
        return self.needs.tokens(req.kind, self.lengths.estimate(req.task), p, self._sigma)

    def _chance(self, req: SchedRequest, budget: float) -> float:
        """P(``req`` finishes in time) with ``budget`` = speed x time left."""
        return self.needs.chance(req.kind, self.lengths.estimate(req.task), budget, self._sigma)

    def chance_of(self, req: SchedRequest, now: float, load: float) -> float:
        """P(``req`` finishes by its deadline) if it ran from ``now`` at the calibrated
        f(``load``): its kind's effective length (``saber.scheduler._chance``). What the
        default policy decides with; ``docs/admission.md`` draws it."""
        return self._chance(req, self.predicted_speed(load) * (req.deadline - now))

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
        if self.policy.decide == "chance":
            need = self._need(req, self.policy.refuse_below)
        else:
            need = req.tokens
        return req.arrival + task.useful_s - need / self.max_speed

    def _rebuild_times(self) -> None:
        self._times_f1 = self.max_speed
        self._built_needs = {}
        if self.policy.decide == "chance":
            for r in self._waiting():
                if r.kind not in self._built_needs:
                    self._built_needs[r.kind] = self._need(r, self.policy.demote_below)
        self._demote_at = [(self._demotion_time(r), r.id) for r in self._hpq]
        heapq.heapify(self._demote_at)
        self._expire_at = [
            (t, r.id) for r in self._waiting() if (t := self._expiry_time(r)) is not None
        ]
        heapq.heapify(self._expire_at)

    # -- state -----------------------------------------------------------

    @property
    def load(self) -> int:
        """Sequences admitted and not yet finished: the L of f(L). A request counts its
        ``seqs`` (n completions of each prompt of a list)."""
        return self._load

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
        cap = self.policy.max_concurrency
        if req.seqs < 1 or (cap is not None and req.seqs > cap):
            raise ValueError(
                f"request {req.id} runs {req.seqs} sequences; max_concurrency is {cap}"
            )
        demote_at = self._demotion_time(req)  # may raise: before any state changes
        expire_at = self._expiry_time(req)
        self._tick(now)
        limit = self.policy.queue_cap
        if limit is not None and self.queued(req.task) >= limit:
            rejected = self._leave_queued(req, now, Outcome.REJECTED_QUEUE_FULL)
            self.recent.append(rejected)
            return [rejected, *self.poll(now)]
        self._kinds[req.task] = req.sla_kind
        self._arrivals.observe(req, now)
        self._hpq.push(req)
        heapq.heappush(self._demote_at, (demote_at, req.id))
        if expire_at is not None:
            heapq.heappush(self._expire_at, (expire_at, req.id))
        return self.poll(now)

    def poll(self, now: float) -> list[Decision]:
        """Demote what can no longer make its deadline, reject what can no longer be
        useful, then admit whatever the policy allows at ``now``."""
        self._tick(now)
        self._arrivals.expire(now)
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
        earliest demotion or expiry of a waiting request, and, while requests wait, the
        moment arrivals fall quiet (a request held back for what the requests still to
        come would lose may pass then: seen on vLLM, a long request held a minute beside
        one other while nothing else came)."""
        quiet = None
        if self.queued() and self.policy.decide == "chance" and self.policy.future:
            quiet = self._arrivals.quiet_at()
        times = [
            t
            for t in (
                self._peek(self._demote_at, self._hpq.__contains__),
                self._peek(self._expire_at, self.is_queued),
                quiet,
            )
            if t is not None
        ]
        return min(times) if times else None

    # -- learning from what finished (beyond the paper) -----------------

    def _learn(self, req: SchedRequest, now: float, tokens: int) -> None:
        self._tick(now)
        self.lengths.observe(req.task, tokens // req.seqs or 1)
        clock, area = self._at_admit[req.id]
        took = now - (req.admitted_at if req.admitted_at is not None else now)
        raw = self._clock - clock  # tokens the raw f(L) predicted over its run
        if took <= 0 or raw <= 0:
            return
        load = max((self._area - area) / took, 1.0)
        # A request of several sequences made its tokens in parallel.
        per_seq = tokens / req.seqs
        self._cal.learn(
            at=now, load=load, speed=per_seq / took, expected=raw / took, tokens=int(per_seq)
        )
        self._sigma = rounded_sigma(self._cal.sigma)
        if self.max_speed < (1.0 - REBUILD_AT) * self._times_f1 or self._needs_grew(req.task):
            self._rebuild_times()

    def _needs_grew(self, task: str) -> bool:
        """Whether what a waiting kind of ``task`` needs to avoid demotion has grown past
        REBUILD_AT since its times were computed."""
        if self.policy.decide != "chance":
            return False
        for kind, need in self._built_needs.items():
            if kind[0] != task:
                continue
            req = SchedRequest("", task, 0.0, 0.0, kind[1], kind[2], kind[3], kind[4])
            if self._need(req, self.policy.demote_below) > (1.0 + REBUILD_AT) * need:
                return True
        return False

    # -- the token and load clocks --------------------------------------

    def _tick(self, now: float) -> None:
        """Advance the clocks to ``now`` at the load that held since the last event."""
        if self._clock_at is not None and now > self._clock_at and self._running:
            dt = now - self._clock_at
            self._clock += self._f(self._load) * dt
            self._area += self._load * dt
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
            self._load -= req.seqs
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
        return self.calibration * (self._clock_now(now) - self._at_admit[req.id][0])

    def _clock_now(self, now: float) -> float:
        """The token clock (tokens one request has made since the start, uncalibrated),
        run forward to ``now``."""
        if self._clock_at is not None and now > self._clock_at:
            return self._clock + self._f(self._load) * (now - self._clock_at)
        return self._clock

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

    # -- Algorithm 1 -----------------------------------------------------

    def _admit(self, now: float) -> list[Decision]:
        if self.policy.decide == "mean":
            return self._admit_mean(now)
        out = self._admit_chance(now)
        if not out and not self._running and self.queued():
            out = self._admit_on_idle(now)
        return out

    def _admit_on_idle(self, now: float) -> list[Decision]:
        """Nothing runs, yet requests wait: one of them runs whatever the predictions
        say (an idle engine is never kept idle), the most urgent of the HPQ, else the
        oldest demoted one."""
        if len(self._hpq):
            req = self._hpq.most_urgent_passing(lambda _: -math.inf)
            assert req is not None
            self._hpq.remove(req.id)
            return [self._start(req, now, Tier.HIGH)]
        req = self._lpq.popleft()
        assert req is not None
        return [self._start(req, now, Tier.LOW)]

    def _fits(self, req: SchedRequest) -> bool:
        """Room under max_concurrency for all of its sequences."""
        cap = self.policy.max_concurrency
        return cap is None or self._load + req.seqs <= cap

    # -- decisions from the chance of finishing in time --------------------

    def _admit_chance(self, now: float) -> list[Decision]:
        """The most urgent waiting request whose chance at f(L + 1) clears what one
        more sequence costs (``_earliest``); once none of the HPQ waits, demoted
        requests, oldest first, while the running requests have room for them."""
        out: list[Decision] = []
        while len(self._hpq):
            req = self._next_passing(self._hpq, now, 0.0)
            if req is None or not self._fits(req):
                break
            if req.seqs > 1 and not self._worth(req, now):
                break
            self._hpq.remove(req.id)
            out.append(self._start(req, now, Tier.HIGH))
        while len(self._lpq) and not len(self._hpq):
            req = self._next_passing(self._lpq, now, self.policy.late_value)
            if req is None or not self._fits(req):
                break
            self._lpq.remove(req.id)
            out.append(self._start(req, now, Tier.LOW))
        return out

    def _next_passing(self, queue: TaskQueues, now: float, credit: float) -> SchedRequest | None:
        """The most urgent request of ``queue`` whose chance at f(L + 1), plus
        ``credit``, clears what it costs. The costs (O(running)) are only computed when
        some request could pass were they small."""
        speed = self.predicted_speed(self._load + 1)
        if not self._load:
            return queue.most_urgent_passing(lambda r: self._earliest(r, now, speed, None, []))
        if credit < CHANCE_STEP:
            least = CHANCE_STEP - credit  # the cost of the cheapest request one could admit
            cheapest = queue.most_urgent_passing(
                lambda r: self._earliest(r, now, speed, None, [], -least)
            )
            if cheapest is None:
                return None
        running = self._exposure(now, 1) if self.policy.gain else None
        future = self._future(now, speed) if self.policy.future else []
        # Costs of nothing leave a busy engine to requests with a chance of their SLA;
        # best effort (credit) runs at no cost whatever its chance.
        floor = 0.0 if credit else CHANCE_STEP
        return queue.most_urgent_passing(
            lambda r: self._earliest(r, now, speed, running, future, credit, floor)
        )

    def _future(self, now: float, speed: float) -> list[tuple[float, float]]:
        """The requests still to come, as (rate x chance each loses to one more
        sequence, how long each runs) per task of the recent mix: one more sequence
        slows every one that arrives while it runs, for as long as both run."""
        rate = self._arrivals.rate(now)
        if rate <= 0:
            return []
        v2 = self.predicted_speed(self._load + 2)
        out = []
        for task, share in self._arrivals.mix(now).items():
            probe = self._arrivals.last.get(task)
            if probe is None or probe.sla_kind != "e2e":
                continue
            sla = probe.deadline - probe.arrival
            lost = self._chance(probe, speed * sla) - self._chance(probe, v2 * sla)
            if lost > 0:
                out.append((rate * share * lost, probe.tokens / speed))
        return out

    def _earliest(
        self,
        req: SchedRequest,
        now: float,
        speed: float,
        running: tuple[np.ndarray, np.ndarray] | None,
        future: list[tuple[float, float]],
        credit: float = 0.0,
        floor: float = 0.0,
    ) -> float:
        """The earliest deadline with which a request of ``req``'s kind passes now: its
        chance at ``speed`` clears what it costs, the loss ``running`` to the running
        requests plus that to the requests arriving while it runs (``future``: a
        newcomer that runs D seconds overlaps, on average, D - d/2 seconds of those
        that run d <= D, and D^2 / 2d of longer ones)."""
        if req.sla_kind == "ttft":
            return self._earliest_deadline(req.task, req.tokens, now, speed)
        runs = req.tokens / speed
        p = -credit
        if running is not None and running[0].size:
            lost, left = running
            p += float(np.sum(lost * np.minimum(1.0, runs / left)))
        for share, d in future:
            p += share * (runs - d / 2 if d <= runs else runs * runs / (2 * d))
        p = max(p * req.seqs, floor)
        if p > 1.0 - CHANCE_STEP:
            return math.inf  # it cannot win more than it costs
        if p <= 0.0:
            return -math.inf
        p = math.ceil(p / CHANCE_STEP) * CHANCE_STEP
        return now + self._need(req, p) / speed

    def _worth(self, req: SchedRequest, now: float) -> bool:
        """A request of several sequences, judged at the load it brings."""
        speed = self.predicted_speed(self._load + req.seqs)
        chance = self._chance(req, speed * (req.deadline - now)) ** req.seqs
        floor = self.policy.demote_below
        loss = self._loss(now, req.seqs) if self.policy.gain and self._load else 0.0
        return chance >= max(floor, loss)

    def _loss(self, now: float, extra: int, runs: float = math.inf) -> float:
        """Requests on schedule that ``extra`` more sequences, running ``runs`` seconds,
        are expected to cost the running ones (``_exposure``)."""
        lost, left = self._exposure(now, extra)
        return float(np.sum(lost * np.minimum(1.0, runs / left))) if lost.size else 0.0

    def _exposure(self, now: float, extra: int) -> tuple[np.ndarray, np.ndarray]:
        """What ``extra`` more sequences would cost each running HPQ request: its chance
        at f(L) less its chance at f(L + extra), were they to run until its deadline,
        and the seconds to its deadline. A newcomer that ends sooner costs that share
        of it: the requests it can cost are those finishing about at their deadline."""
        empty = np.zeros(0)
        v0 = self.predicted_speed(self._load)
        v1 = self.predicted_speed(self._load + extra)
        if v1 >= v0 or not self._load:
            return empty, empty
        rows: dict[tuple[str, bool], list[tuple[float, float, float, float]]] = {}
        clock = self._clock_now(now)
        cal = self.calibration
        learned: dict[str, bool] = {}
        at_admit = self._at_admit
        high, e2e = Tier.HIGH, "e2e"
        for req in self._running.values():
            left = req.deadline - now
            if req.tier is not high or req.sla_kind != e2e or left <= 0:
                continue
            generated = req.generated
            made = max(
                float(generated) if generated is not None else cal * (clock - at_admit[req.id][0]),
                0.0,
            )
            known = learned.get(req.task)
            if known is None:
                known = learned[req.task] = self.lengths.estimate(req.task) is not None
            exact = req.exact or not known
            limit = float(req.tokens if req.exact else req.cap or MAX_TOKENS)
            rows.setdefault((req.task, exact), []).append(
                (made, limit, left, max(req.tokens - made, 1.0))
            )
        lost, lefts = [], []
        sigma = self._cal.sigma
        for (task, exact), group in rows.items():
            made_a, limit_a, left_a, rest_a = np.array(group, dtype=float).T
            est = None if exact else self.lengths.estimate(task)
            before = running_chance(est, made_a, limit_a, v0 * left_a, sigma, rest_a)
            after = running_chance(est, made_a, limit_a, v1 * left_a, sigma, rest_a)
            lost.append(before - after)
            lefts.append(left_a)
        if not lost:
            return empty, empty
        return np.concatenate(lost), np.concatenate(lefts)

    # -- decisions from the mean (the paper's, and the closed loop's) ------

    def _admit_mean(self, now: float) -> list[Decision]:
        out: list[Decision] = []
        cap = self.policy.max_concurrency
        protected = self._protected_speed_at()
        while len(self._hpq) and (cap is None or self.load < cap):
            decision = self._admit_one_from_hpq(now, protected)
            if decision is None:
                break  # nothing passes: wait for the next event
            out.append(decision)
            if self.policy.protection == "frozen":
                protected = max(protected, decision.request.required_speed or 0.0)
        self._last_protected = protected
        if not len(self._hpq):
            out += self._admit_low(now)
        return out

    def _admit_one_from_hpq(self, now: float, protected: float) -> Decision | None:
        predicted = self.predicted_speed(self.load + 1)  # f(curLoad + 1)
        if predicted < protected:
            return None  # admitting anyone would break a running request's SLA
        if self.policy.order == "deadline":
            req = self._hpq.most_urgent_passing(
                lambda r: self._earliest_deadline(r.task, r.tokens, now, predicted)
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

    def _admit_low(self, now: float) -> list[Decision]:
        """Best effort for demoted requests, oldest first, when the policy allows."""
        mode, cap = self.policy.lpq, self.policy.max_concurrency
        out: list[Decision] = []
        if mode == "idle":
            if self._high_running:
                return out
            headroom = self._fresh_need()
        while len(self._lpq) and (cap is None or self.load < cap):
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

    def _protected_speed_at(self) -> float:
        """The speed f(L+1) must meet for anyone to be admitted, per the policy."""
        return self._protected_speed() if self.policy.protection == "frozen" else 0.0

    def _start(self, req: SchedRequest, now: float, tier: Tier) -> Decision:
        req.admitted_at = now
        self._running[req.id] = req
        self._load += req.seqs
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
            "speed_spread": round(self.speed_sigma, 4),
            "decide": self.policy.decide,
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
