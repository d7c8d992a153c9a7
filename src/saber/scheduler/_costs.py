"""What one more sequence costs: the chance that a request finishes in time, and the
requests on schedule that admitting one more sequence is expected to cost the running
ones (``_exposure``) and those that arrive while it runs (``_future``).

A part of ``Scheduler`` that decides nothing: ``saber.scheduler._decide`` weighs these
costs against a newcomer's chance, and ``saber.scheduler._placing`` against each
backend's.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from saber.scheduler._arrivals import Arrivals
from saber.scheduler._bookkeeping import Bookkeeping
from saber.scheduler._chance import Needs
from saber.scheduler._lengths import LengthEstimate
from saber.scheduler._request import SchedRequest


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
Running = tuple[np.ndarray, np.ndarray, np.ndarray | None] | None
"""What one more sequence costs each running request, its seconds left, and the chance it
loses per second its decoding is put off (a newcomer's prefill: None when not counted)
(``_exposure``)."""


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
            sla = probe.due - probe.arrival
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
        requests arriving while it runs (``future``). Its prefill beyond what f(L)
        counts (``prefill_s``) puts off every running request's decoding by as much."""
        runs = req.tokens / speed + req.prefill_s
        p = start
        if running is not None and running[0].size:
            lost, left, slope = running
            if delay:
                share = np.minimum(runs, np.maximum(left - delay, 0.0)) / left
            else:
                share = np.minimum(1.0, runs / left)
            p += float(np.sum(lost * share))
            if slope is not None and req.prefill_s > 0.0:
                hit = np.minimum(slope * req.prefill_s, 1.0)
                p += float(np.sum(hit[left > delay]) if delay else np.sum(hit))
        return p + future.loss(runs, delay)

    def _loss(self, now: float, extra: int, runs: float = math.inf) -> float:
        """Requests on schedule that ``extra`` more sequences, running ``runs`` seconds,
        are expected to cost the running ones (``_exposure``)."""
        lost, left, _ = self._exposure(now, extra)
        return float(np.sum(lost * np.minimum(1.0, runs / left))) if lost.size else 0.0

    def _exposure(self, now: float, extra: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """What ``extra`` more sequences would cost each running HPQ request: its chance
        at f(L) less its chance at f(L + extra), were they to run until its deadline,
        and the seconds to its deadline. A newcomer that ends sooner costs that share
        of it: the requests it can cost are those finishing about at their deadline.
        Behind several gateways, each of these also stands for the requests the others
        run here (``set_elsewhere``), whose deadlines this one does not know. With the
        prefill counted, also each one's loss per second its decoding is put off (at
        f(L + extra), over a quarter of its time left)."""
        empty = np.zeros(0)
        v0 = self.predicted_speed(self._load)
        v1 = self.predicted_speed(self._load + extra)
        prefill = self._prefill is not None
        run = self._live
        if (v1 >= v0 and not prefill) or not self._load or not len(run):
            return empty, empty, None
        left_all = run.due - now  # before its first token its prefill is still to come
        live = run.live & (left_all > 0.0)
        if not live.any():
            return empty, empty, None
        left = left_all[live]
        made = run.made[live]
        guess = np.isnan(made)  # no progress reported: the token clock
        if guess.any():
            clock = self._clock_now(now)
            made = np.where(guess, self.calibration * (clock - run.clock[live]), made)
        made = np.maximum(made, 0.0)
        run.refresh(live, self._estimate_of)
        budgets = [v0 * left, v1 * left]
        if prefill:
            budgets.append(v1 * left * 0.75)
        chances = run.chances(live, made, np.stack(budgets), self._cal.sigma)
        lost = np.maximum(chances[0] - chances[1], 0.0)
        others = (self._load + self._seen_elsewhere) / self._load
        slope = (chances[1] - chances[2]) / (0.25 * left) * others if prefill else None
        return lost * others, left, slope

    def _estimate_of(self, key: Hashable) -> LengthEstimate | None:
        """The distribution a running request's key names (``Bookkeeping._start``)."""
        assert isinstance(key, tuple)
        return self.lengths.estimate(key[0], key[1])
