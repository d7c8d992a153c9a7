"""The admission core: two-tier queues and the paper's Algorithm 1. Pure.

Every public method takes ``now`` from its caller and returns decisions; there
is no clock, no I/O and no asyncio here, so the gateway (wall clock) and the
simulator (virtual clock) drive the very same object.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

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
    """

    window_size: int = 8
    max_concurrency: int | None = None
    queue_cap: int | None = None
    lpq_timeout_s: float | None = None
    lpq_guard: bool = False

    def __post_init__(self) -> None:
        if self.window_size < 1:
            raise ValueError("window_size must be >= 1")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if self.queue_cap is not None and self.queue_cap < 0:
            raise ValueError("queue_cap must be >= 0")
        if self.lpq_timeout_s is not None and self.lpq_timeout_s <= 0:
            raise ValueError("lpq_timeout_s must be > 0")


class Scheduler:
    """SABER's admission control over per-task high- and low-priority queues."""

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
        self.recent: deque[Decision] = deque(maxlen=100)
        self.set_speed_model(speed)

    # -- the speed model -------------------------------------------------

    def set_speed_model(self, speed: SpeedFn) -> None:
        """Swap f(L), e.g. after a refit; demotion times are recomputed."""
        self._speed = speed
        self._f1 = float(speed(1.0))
        if not self._f1 > 0:
            raise ValueError(f"the speed model predicts f(1) = {self._f1}; it must be > 0")
        self._demote_at = [(self._demotion_time(r), r.id) for r in self._hpq]
        heapq.heapify(self._demote_at)

    def predicted_speed(self, load: float) -> float:
        return float(self._speed(max(1.0, load)))

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
        cap = self.policy.queue_cap
        if cap is not None and self.queued(req.task) >= cap:
            rejected = self._leave_queued(req, now, Outcome.REJECTED_QUEUE_FULL)
            self.recent.append(rejected)
            return [rejected, *self.poll(now)]
        self._hpq.push(req)
        heapq.heappush(self._demote_at, (self._demotion_time(req), req.id))
        return self.poll(now)

    def poll(self, now: float) -> list[Decision]:
        """Demote what can no longer make its deadline, expire old LPQ entries,
        then admit whatever Algorithm 1 allows at ``now``."""
        out = self._demote_due(now)
        out += self._expire_due(now)
        out += self._admit(now)
        self.recent.extend(out)
        return out

    def finish(self, req_id: str, now: float) -> Outcome | None:
        """A running request completed. Returns None if it was not running, so a
        caller that reports twice releases the slot only once."""
        req = self._running.pop(req_id, None)
        if req is None:
            return None
        req.outcome = Outcome.SERVED if req.tier is Tier.HIGH else Outcome.SERVED_DEMOTED
        return req.outcome

    def fail(self, req_id: str, now: float) -> Outcome | None:
        """A running request failed at the backend; its slot is released."""
        req = self._running.pop(req_id, None)
        if req is None:
            return None
        req.outcome = Outcome.FAILED
        return req.outcome

    def cancel(self, req_id: str, now: float) -> Outcome | None:
        """The client went away: leave the queue, or release the running slot."""
        req = self._hpq.remove(req_id) or self._lpq.remove(req_id)
        if req is not None:
            req.outcome = Outcome.CANCELLED_QUEUED
            return req.outcome
        req = self._running.pop(req_id, None)
        if req is not None:
            req.outcome = Outcome.CANCELLED_RUNNING
            return req.outcome
        return None

    def next_wakeup(self) -> float | None:
        """The next time ``poll`` has work even if no request arrives or ends:
        the earliest demotion of an HPQ request, or LPQ expiry."""
        times = [
            t
            for t in (
                self._peek(self._demote_at, self._hpq),
                self._peek(self._expire_at, self._lpq),
            )
            if t is not None
        ]
        return min(times) if times else None

    # -- Algorithm 1 -----------------------------------------------------

    def _admit(self, now: float) -> list[Decision]:
        out: list[Decision] = []
        cap = self.policy.max_concurrency
        while len(self._hpq) and (cap is None or self.load < cap):
            decision = self._admit_one_from_hpq(now)
            if decision is None:
                break  # nothing passes: wait for the next event
            out.append(decision)
        if len(self._hpq):
            return out  # the LPQ is served only when every HPQ is empty
        # Best effort, oldest first, without speed estimation.
        while len(self._lpq) and (cap is None or self.load < cap):
            if self.policy.lpq_guard and (
                self.predicted_speed(self.load + 1) < self._protected_speed()
            ):
                break
            req = self._lpq.popleft()
            assert req is not None
            out.append(self._start(req, now, Tier.LOW))
        return out

    def _admit_one_from_hpq(self, now: float) -> Decision | None:
        predicted = self.predicted_speed(self.load + 1)  # f(curLoad + 1)
        if predicted < self._protected_speed():
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

    def _start(self, req: SchedRequest, now: float, tier: Tier) -> Decision:
        req.admitted_at = now
        self._running[req.id] = req
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
            "protected_speed": self._protected_speed(),
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
