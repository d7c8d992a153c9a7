"""Who is where: the two tiers of queues, the running requests and the load they make.

This part of ``Scheduler`` moves requests between the queues and the running set and
keeps what that changes: the load, the clocks' readings at admission, the heap of
running HPQ requests' required speeds. It decides nothing (``saber.scheduler._decide``
does); it also says when a running request will have freed its slot.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable

import numpy as np

from saber.scheduler._queues import TaskQueues
from saber.scheduler._request import MAX_TOKENS, Action, Decision, Outcome, SchedRequest, Tier
from saber.scheduler._running import RunningSet
from saber.scheduler._speed_model import SpeedModel
from saber.scheduler.lengths._ends import Ends, first_free, kth_free
from saber.scheduler.lengths._task_lengths import Dist

PACE_MIN_TOKENS = 8
PACE_MIN_S = 0.2
"""A streaming request's own pace is trusted from this many tokens and seconds on."""


class Bookkeeping(SpeedModel):
    """The queues (HPQ and LPQ, per task), the running set and its load.

    A mixin of ``Scheduler``, whose ``__init__`` sets the state declared here.
    """

    _hpq: TaskQueues
    _lpq: TaskQueues
    _high_running: int
    _protect: list[tuple[float, str]]  # (-required speed, id) of running HPQ requests
    _live: RunningSet  # the running HPQ requests with an e2e deadline, as arrays
    _budget: tuple[int, float] | None  # (sequences, window s) this scheduler may admit
    _spent: deque[tuple[float, int]]  # (when, sequences) of its admissions in the window

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

    # -- the admission budget (several gateways) ---------------------------

    def set_budget(self, most: int | None, window_s: float = 0.0) -> None:
        """Admit at most ``most`` sequences in any ``window_s`` seconds (None: no bound).

        With M gateways and a fixed headroom H, each keeps to H / (M - 1) per scrape
        interval at each backend (``budget_of``): what the others admitted since a
        gateway's last scrape, which it cannot see, is then at most H, the headroom it
        keeps. A request of more sequences than ``most`` runs when the window is empty."""
        if most is not None and (most < 1 or not window_s > 0):
            raise ValueError(f"a budget needs most >= 1 and window_s > 0, not {most}, {window_s}")
        self._budget = None if most is None else (int(most), float(window_s))
        self._spent.clear()

    @property
    def budget(self) -> tuple[int, float] | None:
        """(sequences, window s) this scheduler may admit (``set_budget``), or None."""
        return self._budget

    def budget_due(self) -> float | None:
        """When the oldest admission still in the window leaves it (None: no budget, or
        none in the window): a request held by the budget may pass then. Never a time
        already past (the window is read at the last event's time)."""
        if self._budget is None or not self._spent_in_window():
            return None
        return self._spent[0][0] + self._budget[1]

    def _spent_in_window(self) -> int:
        """Sequences admitted within the window that ends at the last event's time."""
        assert self._budget is not None
        window = self._budget[1]
        now = self._clock_at if self._clock_at is not None else 0.0
        spent = self._spent
        while spent and spent[0][0] + window <= now:
            spent.popleft()
        return sum(n for _, n in spent)

    def _within_budget(self, seqs: int) -> bool:
        """Whether ``seqs`` more sequences keep the window's admissions within the budget
        (a request of more than the budget runs when the window is empty)."""
        if self._budget is None:
            return True
        used = self._spent_in_window()
        return not used or used + seqs <= self._budget[0]

    # -- admitting and leaving -------------------------------------------

    def _start(self, req: SchedRequest, now: float, tier: Tier) -> Decision:
        if self._budget is not None:
            self._spent.append((now, req.seqs))
        req.admitted_at = now
        self._running[req.id] = req
        self._load += req.seqs
        self._at_admit[req.id] = (self._clock, self._area)
        if tier is Tier.HIGH:
            self._high_running += 1
            e2e = req.sla_kind == "e2e" and req.deadline < math.inf
            if e2e or req.pace:  # what one more sequence can cost it (_exposure)
                self._live.add(
                    req.id,
                    deadline=req.deadline,
                    due=req.due,
                    clock=self._clock,
                    tokens=float(req.tokens),
                    limit=float(req.tokens if req.exact else req.cap or MAX_TOKENS),
                    key=None if req.exact else (req.task, req.dist),
                    e2e=e2e,
                    pace=req.pace,
                )
            # Recorded once, as the paper does: what this request needs from now on.
            req.required_speed = req.required_speed_at(now)
            heapq.heappush(self._protect, (-req.required_speed, req.id))
        return Decision(Action.ADMIT, req, now, tier)

    def _release(self, req_id: str, now: float) -> SchedRequest | None:
        if req_id not in self._running:
            return None
        try:
            self._tick(now)
        finally:  # the slot is freed whatever the speed model does
            self._at_admit.pop(req_id, None)
            self._live.remove(req_id)
            req = self._running.pop(req_id)
            self._load -= req.seqs
            if req.tier is Tier.HIGH:
                self._high_running -= 1
            if len(self._protect) > 2 * len(self._running) + 64:
                self._protected_speed()  # prunes it: only "frozen" protection reads it
        return req

    def _leave_queued(self, req: SchedRequest, now: float, outcome: Outcome) -> Decision:
        req.outcome = outcome
        return Decision(Action.REJECT, req, now, req.tier, outcome)

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

    # -- when a slot frees -----------------------------------------------

    def time_to_free(self, now: float, q: float = 0.5, slots: int = 1) -> float | None:
        """Seconds from ``now`` by which ``slots`` running requests have finished and
        freed theirs, with probability ``q``; None when nothing runs.

        Each running request still has tokens to make: how many is uncertain, given
        what it has made so far (learned lengths: the distribution whose mean is
        ``lengths.remaining``; a request that has run past the mean is likely a long
        one), and it makes them at its own pace since its first token when it
        streams, else at f(L), with what it has made read off the token clock. The
        first slot frees when the soonest of them ends: the ``q``-quantile of that
        minimum (``saber.scheduler.lengths._ends``). Without learned lengths, each
        request's expected remainder is taken as certain.
        """
        if not self._running:
            return None
        speed = self.predicted_speed(self.load)
        by_dist: dict[tuple[str, Dist], list[tuple[float, float, float, float]]] = {}
        for req in self._running.values():
            if req.generated is not None:
                made = float(req.generated)
                pace = self._pace(req, now) or speed
            else:
                made = float(max(int(self._made(req, now)), 0))
                pace = speed
            cap = float(req.cap) if req.cap else float(MAX_TOKENS)
            by_dist.setdefault((req.task, req.dist), []).append((made, cap, pace, req.tokens))
        groups = []
        for (task, dist), rows in by_dist.items():
            made_a, cap_a, pace_a, tokens = np.array(rows, dtype=float).T
            left = np.maximum(tokens - made_a, 1.0)  # without a distribution
            groups.append(Ends(self.lengths.estimate(task, dist), made_a, cap_a, pace_a, left))
        return first_free(groups, q) if slots <= 1 else kth_free(groups, q, slots)

    def slots_until_room(self, task: str) -> int:
        """How many slots must free before a request of ``task`` leaves its queue (and
        a full queue has room): its most urgent waiting one is admitted behind the HPQ
        requests due sooner; only demoted ones waiting, behind all of the HPQ and the
        older demoted ones."""
        ahead = self._hpq.ahead_of(task)
        if ahead is None:
            first = self._lpq.oldest_of(task)
            if first is None:
                return 1
            key = (first.arrival, first.id)
            ahead = len(self._hpq) + sum((r.arrival, r.id) < key for r in self._lpq)
        return ahead + 1

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
