"""What one more sequence costs: the chance that a request finishes in time, and the
requests on schedule that admitting one more sequence is expected to cost the running
ones (``_exposure``) and those that arrive while it runs (``_future``).

A part of ``Scheduler`` that decides nothing: ``saber.scheduler._decide`` weighs these
costs against a newcomer's chance, and ``saber.scheduler._placing`` against each
backend's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from saber.scheduler._arrivals import Arrivals
from saber.scheduler._bookkeeping import Bookkeeping
from saber.scheduler._chance import Needs, running_chance
from saber.scheduler._request import MAX_TOKENS, SchedRequest, Tier
from saber.scheduler._task_lengths import Dist


def overlap(age: float, runs: float, d: float, delay: float = 0.0) -> float:
    """The arrivals a newcomer that starts in ``delay`` s and runs ``runs`` s is expected
    to slow, per arrival a second, each counted by the share of its own run ``d`` that
    both run. Arrivals that have lasted ``age`` s are taken to go on for as long again,
    on average: x s more with chance exp(-x / age). Were they certain to go on, it
    would be runs - d / 2 (d <= runs) or runs^2 / 2d."""

    def coming(x: float) -> float:  # over t in 0..x, the seconds of arrivals within t
        return age * x + age * age * math.expm1(-x / age)

    shared = coming(runs) - (coming(runs - d) if d <= runs else 0.0)
    return math.exp(-delay / age) * shared / d


@dataclass(frozen=True, slots=True)
class Future:
    """The requests still to come: how long arrivals have lasted, and per task of the
    recent mix (rate x chance each loses to one more sequence, how long each runs)."""

    age: float
    terms: tuple[tuple[float, float], ...] = ()

    def loss(self, runs: float, delay: float = 0.0) -> float:
        """Requests on schedule that a newcomer running ``runs`` s from ``delay`` s on
        is expected to cost them."""
        return sum(share * overlap(self.age, runs, d, delay) for share, d in self.terms)


NO_FUTURE = Future(1.0)
Running = tuple[np.ndarray, np.ndarray] | None
"""What one more sequence costs each running request, and its seconds left (``_exposure``)."""


class Costs(Bookkeeping):
    """Chances and costs, in requests on schedule.

    A mixin of ``Scheduler``, whose ``__init__`` sets the state declared here.
    """

    needs: Needs
    _arrivals: Arrivals
    _arrival_share: float  # of the requests arriving for this backend, those seen here
    _place_share: float  # of a pool's arrivals (``_arrivals``), those that run here

    def _need(self, req: SchedRequest, p: float) -> float:
        """The work (tokens at the predicted speed) ``req`` needs to finish in time with
        chance ``p``: a quantile of its effective length (``saber.scheduler._chance``)."""
        return self.needs.tokens(
            req.kind, self.lengths.estimate(req.task, req.dist), p, self._sigma
        )

    def _chance(self, req: SchedRequest, budget: float) -> float:
        """P(``req`` finishes in time) with ``budget`` = speed x time left."""
        return self.needs.chance(
            req.kind, self.lengths.estimate(req.task, req.dist), budget, self._sigma
        )

    def _future(self, now: float, speed: float) -> Future:
        """The requests still to come, per task of the recent mix: one more sequence
        slows every one that arrives while it runs, for as long as both run, and
        arrivals go on for as long again as they have lasted, on average."""
        rate = self._arrivals.rate(now) / self._arrival_share * self._place_share
        rate *= self.policy.future_weight
        if rate <= 0:
            return NO_FUTURE
        v2 = self.predicted_speed(self._load + 2)
        terms = []
        for task, share in self._arrivals.mix(now).items():
            probe = self._arrivals.last.get(task)
            if probe is None or probe.sla_kind != "e2e" or probe.tokens <= 0:
                continue
            sla = probe.deadline - probe.arrival
            lost = self._chance(probe, speed * sla) - self._chance(probe, v2 * sla)
            if lost > 0:
                terms.append((rate * share * lost, probe.tokens / speed))
        return Future(self._arrivals.age(now), tuple(terms))

    @staticmethod
    def _cost(
        req: SchedRequest,
        speed: float,
        running: Running,
        future: Future,
        start: float = 0.0,
        delay: float = 0.0,
    ) -> float:
        """``start`` plus what one sequence of ``req`` running at ``speed`` from
        ``delay`` s on costs, in requests on schedule: the loss ``running`` to the
        running requests (those that end within the delay lose nothing) and that to the
        requests arriving while it runs (``future``)."""
        runs = req.tokens / speed
        p = start
        if running is not None and running[0].size:
            lost, left = running
            if delay:
                share = np.minimum(runs, np.maximum(left - delay, 0.0)) / left
            else:
                share = np.minimum(1.0, runs / left)
            p += float(np.sum(lost * share))
        return p + future.loss(runs, delay)

    def _loss(self, now: float, extra: int, runs: float = math.inf) -> float:
        """Requests on schedule that ``extra`` more sequences, running ``runs`` seconds,
        are expected to cost the running ones (``_exposure``)."""
        lost, left = self._exposure(now, extra)
        return float(np.sum(lost * np.minimum(1.0, runs / left))) if lost.size else 0.0

    def _exposure(self, now: float, extra: int) -> tuple[np.ndarray, np.ndarray]:
        """What ``extra`` more sequences would cost each running HPQ request: its chance
        at f(L) less its chance at f(L + extra), were they to run until its deadline,
        and the seconds to its deadline. A newcomer that ends sooner costs that share
        of it: the requests it can cost are those finishing about at their deadline.
        Behind several gateways, each of these also stands for the requests the others
        run here (``set_elsewhere``), whose deadlines this one does not know."""
        empty = np.zeros(0)
        v0 = self.predicted_speed(self._load)
        v1 = self.predicted_speed(self._load + extra)
        if v1 >= v0 or not self._load:
            return empty, empty
        rows: dict[tuple[str, Dist, bool], list[tuple[float, float, float, float]]] = {}
        clock = self._clock_now(now)
        cal = self.calibration
        learned: dict[str, bool] = {}  # task -> whether its lengths are learned
        at = self._at_admit  # id -> the clocks at its admission
        high, e2e = Tier.HIGH, "e2e"
        for req in self._running.values():
            if req.tier is not high or req.sla_kind != e2e:
                continue
            left = req.deadline - now
            if left <= 0:
                continue
            generated = req.generated
            made = float(generated) if generated is not None else cal * (clock - at[req.id][0])
            if made < 0.0:
                made = 0.0
            rest = req.tokens - made
            key: tuple[str, Dist, bool]
            if req.exact:
                key, limit = (req.task, None, True), float(req.tokens)
            else:
                task = req.task
                known = learned.get(task)
                if known is None:
                    known = learned[task] = self.lengths.estimate(task) is not None
                key, limit = (task, req.dist, not known), float(req.cap or MAX_TOKENS)
            group = rows.get(key)
            if group is None:
                group = rows[key] = []
            group.append((made, limit, left, rest if rest > 1.0 else 1.0))
        lost, lefts = [], []
        sigma = self._cal.sigma
        for (task, dist, exact), group in rows.items():
            made_a, limit_a, left_a, rest_a = np.array(group, dtype=float).T
            est = None if exact else self.lengths.estimate(task, dist)
            budgets = np.stack((v0 * left_a, v1 * left_a))
            before, after = running_chance(est, made_a, limit_a, budgets, sigma, rest_a)
            lost.append(before - after)
            lefts.append(left_a)
        if not lost:
            return empty, empty
        # The requests other gateways run here (as last scraped) are slowed as well:
        # taken to be like this one's, each running request stands for that many.
        others = (self._load + self._seen_elsewhere) / self._load
        return np.concatenate(lost) * others, np.concatenate(lefts)
