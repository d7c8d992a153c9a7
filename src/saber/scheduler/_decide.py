"""The decision rule: when a waiting request is admitted, demoted or expired.

This part of ``Scheduler`` is Algorithm 1 and what replaced its mean: the chance that
a request finishes in time (its need at a chance, the earliest deadline that passes
at f(L + 1)), what one more sequence costs the running requests and those still to
come (``_exposure``, ``_future``), the paper's protection of running requests, and
the demotion and expiry times, rebuilt when the speed or the needs move.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable

import numpy as np

from saber.scheduler._arrivals import Arrivals
from saber.scheduler._bookkeeping import Bookkeeping
from saber.scheduler._chance import Needs, running_chance
from saber.scheduler._outcome import Outcome
from saber.scheduler._queues import TaskQueues
from saber.scheduler._request import MAX_TOKENS, Action, Decision, Kind, SchedRequest, Tier
from saber.scheduler._speed_model import REBUILD_AT

CHANCE_STEP = 0.02
"""The admission threshold is rounded up to this, so its quantiles are cached."""


class Decide(Bookkeeping):
    """Admission, demotion and expiry, from the chance of finishing in time or the mean.

    A mixin of ``Scheduler``, whose ``__init__`` sets the state declared here.
    """

    needs: Needs
    _kinds: dict[str, str]  # task -> the SLA kind its requests carry
    _rng: random.Random
    _arrivals: Arrivals
    _arrival_share: float  # of the requests arriving for this backend, those seen here
    _built_needs: dict[Kind, float]  # kind -> need when timed
    # Lazy min-heaps: stale entries are skipped when they surface.
    _demote_at: list[tuple[float, str]]
    _expire_at: list[tuple[float, str]]
    _last_protected: float
    paused: bool  # admit nothing here: a pool's backend out of service (Scheduler)

    # -- when a waiting request is due -----------------------------------

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

    # -- Algorithm 1 -----------------------------------------------------

    def _admit(self, now: float) -> list[Decision]:
        if self.paused:
            return []
        if self.policy.decide == "mean":
            return self._admit_mean(now)
        out = self._admit_chance(now)
        if not out and self.engine_idle and self.queued():
            out = self._admit_on_idle(now)
        return out

    def _admit_on_idle(self, now: float) -> list[Decision]:
        """Nothing runs, yet requests wait: one of them runs whatever the predictions
        say (an idle engine is never kept idle), the most urgent of the HPQ, else the
        oldest demoted one."""
        if len(self._hpq):
            req = self._hpq.most_urgent_passing(lambda _: -math.inf)
            assert req is not None
            if not self._within_budget(req.seqs):
                return []
            self._hpq.remove(req.id)
            return [self._start(req, now, Tier.HIGH)]
        (req,) = self._lpq.front(1)
        if not self._within_budget(req.seqs):
            return []
        self._lpq.remove(req.id)
        return [self._start(req, now, Tier.LOW)]

    def _fits(self, req: SchedRequest) -> bool:
        """Room under max_concurrency for all of its sequences, within the budget."""
        cap = self.policy.max_concurrency
        return (cap is None or self._load + req.seqs <= cap) and self._within_budget(req.seqs)

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
        if self._load and credit < CHANCE_STEP:
            least = CHANCE_STEP - credit  # the cost of the cheapest request one could admit
            cheapest = queue.most_urgent_passing(
                lambda r: self._earliest(r, now, speed, None, [], -least)
            )
            if cheapest is None:
                return None
        return queue.most_urgent_passing(self._earliest_rule(now, speed, credit))

    def _earliest_rule(
        self, now: float, speed: float, credit: float
    ) -> Callable[[SchedRequest], float]:
        """The earliest deadline with which a waiting request passes now, as a function
        of the request, its costs to the running requests and those to come computed
        once (O(running))."""
        if not self._load:
            return lambda r: self._earliest(r, now, speed, None, [])
        running = self._exposure(now, 1) if self.policy.gain else None
        future = self._future(now, speed) if self.policy.future_weight else []
        # Costs of nothing leave a busy engine to requests with a chance of their SLA;
        # best effort (credit) runs at no cost whatever its chance.
        floor = 0.0 if credit else CHANCE_STEP
        return lambda r: self._earliest(r, now, speed, running, future, credit, floor)

    def _future(self, now: float, speed: float) -> list[tuple[float, float]]:
        """The requests still to come, as (rate x chance each loses to one more
        sequence, how long each runs) per task of the recent mix: one more sequence
        slows every one that arrives while it runs, for as long as both run."""
        rate = self._arrivals.rate(now) / self._arrival_share * self.policy.future_weight
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
        p = max(self._cost(req, speed, running, future, -credit) * req.seqs, floor)
        if p > 1.0 - CHANCE_STEP:
            return math.inf  # it cannot win more than it costs
        if p <= 0.0:
            return -math.inf
        p = math.ceil(p / CHANCE_STEP) * CHANCE_STEP
        return now + self._need(req, p) / speed

    @staticmethod
    def _cost(
        req: SchedRequest,
        speed: float,
        running: tuple[np.ndarray, np.ndarray] | None,
        future: list[tuple[float, float]],
        start: float = 0.0,
    ) -> float:
        """``start`` plus what one sequence of ``req`` running at ``speed`` costs, in
        requests on schedule: the loss ``running`` to the running requests and that to
        the requests arriving while it runs (``future``)."""
        runs = req.tokens / speed
        p = start
        if running is not None and running[0].size:
            lost, left = running
            p += float(np.sum(lost * np.minimum(1.0, runs / left)))
        for share, d in future:
            p += share * (runs - d / 2 if d <= runs else runs * runs / (2 * d))
        return p

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
            if req is None or not self._within_budget(req.seqs):
                return None
            self._hpq.remove(req.id)
            return self._start(req, now, Tier.HIGH)
        window = self._hpq.front(self.policy.window_size)
        self._rng.shuffle(window)  # RandomSample(HPQ, windowSize)
        for req in window:
            if self._passes(req, now, predicted):
                if not self._within_budget(req.seqs):
                    return None  # several gateways: the others' share of this backend
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
            (req,) = self._lpq.front(1)
            if not self._within_budget(req.seqs):
                break
            self._lpq.remove(req.id)
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

    def _protected_speed_at(self) -> float:
        """The speed f(L+1) must meet for anyone to be admitted, per the policy."""
        return self._protected_speed() if self.policy.protection == "frozen" else 0.0

    # -- demotion and expiry -----------------------------------------------

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
