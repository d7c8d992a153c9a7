"""The admission core: two-tier queues and the paper's Algorithm 1. Pure.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from saber.scheduler._queues import TaskQueues
from saber.scheduler._request import Action, Decision, Outcome, SchedRequest, Tier

SpeedFn = Callable[[float], float]


@dataclass(frozen=True, slots=True)
class Policy:
    """The knobs of Algorithm 1, and nothing else.

    ``window_size``: how many requests from the front of the HPQs are candidates
    at each admission round (the paper's windowSize); they are tried in random
    order, which avoids head-of-line blocking.
    ``max_concurrency``: a hard cap on requests running at the backend.
    ``queue_cap``: the most requests of one task type that may wait (HPQ + LPQ);
    an arrival past it is rejected.
    ``lpq_timeout_s``: the longest a demoted request may wait in the LPQ before it
    is rejected; None waits for ever, as in the paper.
    ``lpq_guard`` (beyond the paper, off by default): serve the LPQ only while
    f(L+1) still meets every running HPQ request's required speed, so best-effort
    work never breaks an SLA that admission promised. The paper serves the LPQ
    whenever the HPQs are empty; in the benchmark the guard adds up to 6.4
    goodput points under load and never costs more than 0.3 (docs/bench.md).
    ``protection``: what a running HPQ request is protected against (line 10).
    ``"frozen"``, the paper: the required speed recorded at admission, for its
    whole life. ``"progress"`` (beyond the paper): the speed it still needs, from
    its expected tokens less the tokens the speed model says it has made so far,
    over the time left; one expected to be done, past its deadline or needing
    more than f(1) no longer blocks anyone. ``"value"`` (beyond the paper):
    progress-aware, and a running request is protected only while that keeps
    more requests on schedule than giving it up would (see ``Scheduler``). In the
    benchmark, value protection turns faithful SABER's mean loss to the best static
    B (oracle mode, -2.6 / -4.1 / -8.7 points on W1/W2/W3) into a gain (+9.8 /
    +0.3 / +4.0); progress alone recovers little (docs/bench.md). ``"none"``:
    line 10 as its pseudocode reads in Python, ``predSpd < any(actReq.reqSpd)``:
    ``any()`` is a bool, so running requests never block an admission. The
    benchmark keeps it because it reproduces the paper's averages; the gateway
    does not offer it.
    """

    window_size: int = 8
    max_concurrency: int | None = None
    queue_cap: int | None = None
    lpq_timeout_s: float | None = None
    lpq_guard: bool = False
    protection: Literal["frozen", "progress", "value", "none"] = "frozen"

    def __post_init__(self) -> None:
        if self.window_size < 1:
            raise ValueError("window_size must be >= 1")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if self.queue_cap is not None and self.queue_cap < 0:
            raise ValueError("queue_cap must be >= 0")
        if self.lpq_timeout_s is not None and self.lpq_timeout_s <= 0:
            raise ValueError("lpq_timeout_s must be > 0")
        if self.protection not in ("frozen", "progress", "value", "none"):
            raise ValueError(f"unknown protection {self.protection!r}")

    @classmethod
    def from_config(cls, config: object, **overrides: Any) -> Policy:
        """The policy a settings object names: each Policy field it carries, by name,
        then ``overrides``. The one place settings become a policy."""
        fields = {
            f.name: getattr(config, f.name)
            for f in dataclasses.fields(cls)
            if hasattr(config, f.name)
        }
        return cls(**{**fields, **overrides})

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Scheduler:
    """SABER's admission control over per-task high- and low-priority queues.

    Beyond the paper, the scheduler keeps an estimate of each running request's
    progress from what it already knows: a token clock advances by f(L) per
    second while the load is L, so a request admitted when the clock read c has
    made about clock - c tokens. ``Policy(protection="progress")`` protects a
    running request with the speed it still needs from there on.
    ``Policy(protection="value")`` further weighs that protection against the
    queue it blocks: for each load n the backend could be taken to, it counts the
    running requests f(n) keeps on schedule plus the waiting ones f(n) would
    serve (at most n - L), and protects only the running requests that the best
    such n keeps.
    """

    def __init__(self, speed: SpeedFn, policy: Policy | None = None, *, seed: int = 0) -> None:
        self.policy = policy or Policy()
        self._rng = random.Random(seed)
        self._hpq = TaskQueues()
        self._lpq = TaskQueues()
        self._running: dict[str, SchedRequest] = {}
        # Lazy min-heaps: stale entries are skipped when they surface.
        self._demote_at: list[tuple[float, str]] = []
        self._expire_at: list[tuple[float, str]] = []
        self._protect: list[tuple[float, str]] = []  # (-required speed, id) of running HPQ requests
        # The token clock: tokens one request is predicted to have made since the start.
        self._clock = 0.0
        self._clock_at: float | None = None
        self._clock_at_admit: dict[str, float] = {}
        self._last_protected = 0.0
        self._lapse_at: float | None = None  # when a blocking protection next ends
        self.recent: deque[Decision] = deque(maxlen=100)
        self.set_speed_model(speed)

    # -- the speed model -------------------------------------------------

    def set_speed_model(self, speed: SpeedFn) -> None:
        """Swap f(L), e.g. after a refit; demotion times are recomputed."""
        self._speed = speed
        self._f_at: dict[int, float] = {}
        self._f1 = float(speed(1.0))
        if not self._f1 > 0:
            raise ValueError(f"the speed model predicts f(1) = {self._f1}; it must be > 0")
        self._demote_at = [(self._demotion_time(r), r.id) for r in self._hpq]
        heapq.heapify(self._demote_at)

    def predicted_speed(self, load: float) -> float:
        return float(self._speed(max(1.0, load)))

    def _f(self, load: int) -> float:
        """f at an integer load, cached: the value rule asks for many loads per round."""
        speed = self._f_at.get(load)
        if speed is None:
            speed = self._f_at[load] = self.predicted_speed(load)
        return speed

    @property
    def max_speed(self) -> float:
        """f(1): the fastest the backend can ever serve one request."""
        return self._f1

    def _demotion_time(self, req: SchedRequest) -> float:
        # required speed tokens / (deadline - t) reaches f(1) at this t.
        return req.deadline - req.tokens / self._f1

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

    def _queue(self, tier: Tier) -> TaskQueues:
        return self._hpq if tier is Tier.HIGH else self._lpq

    # -- events ----------------------------------------------------------

    def offer(self, req: SchedRequest, now: float) -> list[Decision]:
        """A request arrives. Returns what happened to it and to any other."""
        if self.is_queued(req.id) or req.id in self._running:
            raise ValueError(f"request {req.id} is already known to the scheduler")
        demote_at = self._demotion_time(req)  # may raise: before any state changes
        self._tick(now)
        cap = self.policy.queue_cap
        if cap is not None and self.queued(req.task) >= cap:
            rejected = self._leave_queued(req, now, Outcome.REJECTED_QUEUE_FULL)
            self.recent.append(rejected)
            return [rejected, *self.poll(now)]
        self._hpq.push(req)
        heapq.heappush(self._demote_at, (demote_at, req.id))
        return self.poll(now)

    def poll(self, now: float) -> list[Decision]:
        """Demote what can no longer make its deadline, expire old LPQ entries,
        then admit whatever Algorithm 1 allows at ``now``."""
        self._tick(now)
        out = self._demote_due(now)
        out += self._expire_due(now)
        out += self._admit(now)
        self.recent.extend(out)
        return out

    def finish(self, req_id: str, now: float, tokens: int | None = None) -> Outcome | None:
        """A running request completed, having generated ``tokens`` (None: not
        known). Returns None if it was not running, so a caller that reports twice
        releases the slot only once."""
        req = self._release(req_id, now)
        if req is None:
            return None
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
        """The next time ``poll`` has work even if no request arrives or ends:
        the earliest demotion of an HPQ request, or LPQ expiry; with progress-aware
        protection, also when a running request that holds the queue back is
        expected to stop needing protection."""
        lapse = self._lapse_at if self.queued() else None
        times = [
            t
            for t in (
                self._peek(self._demote_at, self._hpq),
                self._peek(self._expire_at, self._lpq),
                lapse,
            )
            if t is not None
        ]
        return min(times) if times else None

    # -- the token clock (beyond the paper) ------------------------------

    def _tick(self, now: float) -> None:
        """Advance the token clock to ``now`` at the load that held since the last event."""
        if self._clock_at is not None and now > self._clock_at and self._running:
            self._clock += self._f(len(self._running)) * (now - self._clock_at)
        if self._clock_at is None or now > self._clock_at:
            self._clock_at = now

    def _release(self, req_id: str, now: float) -> SchedRequest | None:
        if req_id not in self._running:
            return None
        try:
            self._tick(now)
        finally:  # the slot is freed whatever the speed model does
            self._clock_at_admit.pop(req_id, None)
            req = self._running.pop(req_id)
        return req

    def _still_needs(self, req_id: str, now: float) -> float:
        """The speed a running HPQ request still needs, from its estimated progress.

        0 when it no longer needs protecting: expected to be done already, past its
        deadline, or needing more than f(1), which no admission decision can give it.
        """
        req = self._running[req_id]
        made = self._clock - self._clock_at_admit[req_id]
        if self._clock_at is not None and now > self._clock_at:
            made += self._f(len(self._running)) * (now - self._clock_at)
        left = req.tokens - made
        remaining = req.deadline - now
        if left <= 0 or remaining <= 0:
            return 0.0
        need = left / remaining
        return need if need <= self._f1 else 0.0

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
            # Best effort, oldest first, without speed estimation.
            while len(self._lpq) and (cap is None or self.load < cap):
                if self.policy.lpq_guard and self.predicted_speed(self.load + 1) < protected:
                    break
                req = self._lpq.popleft()
                assert req is not None
                out.append(self._start(req, now, Tier.LOW))
        lapses = self.policy.protection in ("progress", "value")
        self._lapse_at = self._next_lapse(now) if lapses else None
        return out

    def _next_lapse(self, now: float) -> float | None:
        """The earliest time a running request's protection ends at the current load:
        expected done, at its deadline, or needing more than f(1). Only needed while
        something waits; without it a quiet gateway would notice only at the next event."""
        if not self.queued():
            return None
        speed, f1 = self._f(self.load), self._f1
        soonest = None
        for rid, req in self._running.items():
            if req.tier is not Tier.HIGH or self._still_needs(rid, now) <= 0:
                continue
            left = req.tokens - (self._clock - self._clock_at_admit[rid])
            remaining = req.deadline - now
            dt = min(left / speed, remaining) if speed > 0 else remaining
            if f1 > speed:
                dt = min(dt, (f1 * remaining - left) / (f1 - speed))
            at = now + dt + 1e-6  # just past it, so the poll then sees it lapsed
            if dt >= 0 and (soonest is None or at < soonest):
                soonest = at
        return soonest

    def _admit_one_from_hpq(self, now: float, protected: float) -> Decision | None:
        predicted = self.predicted_speed(self.load + 1)  # f(curLoad + 1)
        if predicted < protected:
            return None  # admitting anyone would break a running request's SLA
        window = self._hpq.front(self.policy.window_size)
        self._rng.shuffle(window)  # RandomSample(HPQ, windowSize)
        for req in window:
            if predicted >= req.required_speed_at(now):
                self._hpq.remove(req.id)
                return self._start(req, now, Tier.HIGH)
        return None

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
                self._still_needs(rid, now)
                for rid, r in self._running.items()
                if r.tier is Tier.HIGH
            )
            if n > 0
        )
        if not needs:
            return 0.0
        if mode == "progress":
            return needs[-1]
        speed = self._f(self._best_load(now, needs))
        kept = bisect.bisect_right(needs, speed)
        return needs[kept - 1] if kept else 0.0

    def _best_load(self, now: float, needs: list[float]) -> int:
        """The load n >= L that keeps the most requests on schedule: running ones with
        need <= f(n), plus up to n - L waiting ones with required speed <= f(n). Ties
        go to the lowest n, so protection yields only to a strictly larger gain."""
        load = self.load
        waiting = sorted(s for s in (r.required_speed_at(now) for r in self._hpq) if s <= self._f1)
        cap = self.policy.max_concurrency
        top = load + len(waiting)
        if cap is not None:
            top = min(top, cap)
        best, best_value = load, bisect.bisect_right(needs, self._f(load))
        for n in range(load + 1, top + 1):
            speed = self._f(n)
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
        self._clock_at_admit[req.id] = self._clock
        if tier is Tier.HIGH:
            # Recorded once, as the paper does: what this request needs from now on.
            req.required_speed = req.required_speed_at(now)
            heapq.heappush(self._protect, (-req.required_speed, req.id))
        return Decision(Action.ADMIT, req, now, tier)

    def _demote_due(self, now: float) -> list[Decision]:
        out = []
        heap = self._demote_at
        while heap and heap[0][0] <= now:
            _, req_id = heapq.heappop(heap)
            req = self._hpq.remove(req_id)
            if req is None:
                continue  # already admitted or cancelled
            req.tier = Tier.LOW
            req.demoted_at = now
            self._lpq.push(req)
            if self.policy.lpq_timeout_s is not None:
                heapq.heappush(self._expire_at, (now + self.policy.lpq_timeout_s, req.id))
            out.append(Decision(Action.DEMOTE, req, now, Tier.LOW))
        return out

    def _expire_due(self, now: float) -> list[Decision]:
        out = []
        heap = self._expire_at
        while heap and heap[0][0] <= now:
            _, req_id = heapq.heappop(heap)
            req = self._lpq.remove(req_id)
            if req is not None:
                out.append(self._leave_queued(req, now, Outcome.REJECTED_LPQ_TIMEOUT))
        return out

    def _leave_queued(self, req: SchedRequest, now: float, outcome: Outcome) -> Decision:
        req.outcome = outcome
        return Decision(Action.REJECT, req, now, req.tier, outcome)

    @staticmethod
    def _peek(heap: list[tuple[float, str]], members: TaskQueues) -> float | None:
        while heap and heap[0][1] not in members:
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
                "max": self._f1,
            },
            "protected_speed": (
                self._protected_speed()
                if self.policy.protection == "frozen"
                else self._last_protected
            ),
            "queues": {
                name: {"high": self._hpq.depth(name), "low": self._lpq.depth(name)}
                for name in names
            },
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
