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
from saber.scheduler._calibration import SIGMA_PRIOR
from saber.scheduler._chance import Needs, normal_cdf, normal_cdf_scalar
from saber.scheduler._request import Kind, SchedRequest
from saber.scheduler._running import PRICED_PER_ROUND, Exposure, Running
from saber.scheduler._speed_model import REBUILD_AT
from saber.scheduler.lengths._histogram import LengthEstimate


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
PACE_SIGMA = SIGMA_PRIOR
"""The least spread a pace is judged with: the spread of a fresh engine (0.15). A TPOT
limit is a mean over a stream whose load moves while it runs, and one calibration scales
f(L) at every load: requests that all finished at one load agree on it (the spread falls
to its floor, 0.02) where the curve's error at the loads a stream will see is larger.
Seen on saber-sim: a stream 12% ahead of its 16 ms limit, predicted at 54 tok/s with 37
others, made 47 and missed it. A hold, which costs a patient request nothing, is then
taken while one more would cost the pace 0.02: a fifth to a third of headroom."""


class Costs(Bookkeeping):
    """Chances and costs, in requests on schedule.

    A mixin of ``Scheduler``, whose ``__init__`` sets the state declared here.
    """

    needs: Needs
    _arrivals: Arrivals
    _arrival_share: float  # of the requests arriving for this backend, those seen here
    _place_share: float  # of a pool's arrivals (``_arrivals``), those that run here
    _built_needs: dict[Kind, float]  # kind -> what it needed when its times were computed

    def _need(self, req: SchedRequest, p: float) -> float:
        """The work (tokens at the predicted speed) ``req`` needs to finish in time with
        chance ``p``: a quantile of its effective length (``saber.scheduler._chance``)."""
        return self.needs.tokens(
            req.kind, self.lengths.estimate(req.task, req.dist), p, self._sigma
        )

    def _needs_grew(self, task: str) -> bool:
        """Whether what a waiting kind of ``task`` needs to avoid demotion has grown past
        REBUILD_AT since its times were computed."""
        if self.policy.decide != "chance":
            return False
        for kind, need in self._built_needs.items():
            if kind[0] != task:
                continue
            req = SchedRequest("", task, 0.0, 0.0, kind[1], kind[2], kind[3], kind[4])
            req.dist = kind[5]
            if self._need(req, self.policy.demote_below) > (1.0 + REBUILD_AT) * need:
                return True
        return False

    def _chance(self, req: SchedRequest, budget: float) -> float:
        """P(``req`` finishes in time) with ``budget`` = speed x time left."""
        return self.needs.chance(
            req.kind, self.lengths.estimate(req.task, req.dist), budget, self._sigma
        )

    def _pace_chance(self, req: SchedRequest, speed: float) -> float:
        """P(``req``'s tokens after its first come at least at its ``pace``) at the
        calibrated per-request ``speed`` (1 without a TPOT limit): its decoding's pace
        strays from the prediction by the speed's lognormal spread."""
        if req.pace <= 0.0:
            return 1.0
        z = math.log(self._decode_pace(speed) / req.pace) / max(self._sigma, PACE_SIGMA)
        return normal_cdf_scalar(z)

    def _decode_pace(self, speed: float) -> float:
        """The pace of a request's tokens after its first at per-request ``speed`` (a
        speed over its whole time, prefill included, as f(L) is profiled): faster by the
        prefill f(L) counts per token, where the profile measured it. A calibration above
        1 is not counted: a pace is promised on what the profile says the engine does at
        each load, the one scale of every load (learned where it was busiest) not
        assumed to hold at a load not seen (PACE_SIGMA)."""
        if self.calibration > 1.0:
            speed /= self.calibration
        if self._prefill is None:
            return speed
        per_token, per_output = self._prefill
        decode = 1.0 / speed - per_token * per_output
        return 1.0 / decode if decode > 0.0 else speed

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
            if probe is None or probe.tokens <= 0 or (probe.sla_kind != "e2e" and not probe.pace):
                continue
            pace = self._pace_chance(probe, speed) - self._pace_chance(probe, v2)
            if probe.sla_kind == "e2e":
                sla = probe.due - probe.arrival
                ahead = self._chance(probe, speed * sla) * self._pace_chance(probe, speed)
                lost = ahead - self._chance(probe, v2 * sla) * self._pace_chance(probe, v2)
            else:
                lost = pace
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
        paces: bool = False,
    ) -> float:
        """``start`` plus what one sequence of ``req`` running at ``speed`` from
        ``delay`` s on costs, in requests on schedule: the loss ``running`` to the
        running requests (those that end within the delay lose nothing) and that to the
        requests arriving while it runs (``future``). Its prefill beyond what f(L)
        counts (``prefill_s``) puts off every running request's decoding by as much.
        ``paces``: the running requests' paces alone."""
        runs = req.tokens / speed + req.prefill_s
        p = start
        if running is not None and running.lost.size:
            if paces:
                return p if running.paced is None else p + running.cost(runs, delay, True)
            p += running.cost(runs, delay)
            if running.slope is not None and req.prefill_s > 0.0:
                p += running.prefill_cost(req.prefill_s, delay)
        return p if paces else p + future.loss(runs, delay)

    def _loss(self, now: float, extra: int, runs: float = math.inf) -> float:
        """Requests on schedule that ``extra`` more sequences, running ``runs`` seconds,
        are expected to cost the running ones (``_exposure``)."""
        exposure = self._exposure(now, extra)
        if exposure is None:
            return 0.0
        return float(np.sum(exposure.lost * np.minimum(1.0, runs / exposure.left)))

    def _exposure(self, now: float, extra: int) -> Running:
        """What ``extra`` more sequences would cost each running HPQ request: its chance
        at f(L) less its chance at f(L + extra), were they to run until its deadline,
        and the seconds to its deadline. A newcomer that ends sooner costs that share
        of it: the requests it can cost are those finishing about at their deadline.
        A running request with a TPOT limit may lose its pace as well: the chance that
        its tokens to come keep its mean time per token within the limit, given the
        pace it has kept so far, over the time it has left to run. Behind several
        gateways, each of these also stands for the requests the others run here
        (``set_elsewhere``), whose deadlines this one does not know. With the prefill
        counted, also each deadline's loss per second its decoding is put off (at
        f(L + extra), over a quarter of its time left).

        Past ``PRICED_PER_ROUND`` running, one more sequence (``extra`` 1, every round
        that may admit) is priced from what each running request was last priced at, at
        most that many of them priced afresh (``RunningSet.to_price``): a round costs
        about the same at 64 and at 1,024 running."""
        run = self._live
        if not self._load or not len(run):
            return None
        v0 = self.predicted_speed(self._load)
        v1 = self.predicted_speed(self._load + extra)
        prefill = self._prefill is not None
        left_all = run.due - now  # before its first token its prefill is still to come
        live = run.live & run.e2e & (left_all > 0.0)
        paced = run.live & (run.pace > 0.0)
        deadlines = live.any() and (v1 < v0 or prefill)
        paces = paced.any() and v1 < v0
        if not (deadlines or paces):
            return None
        slots = np.flatnonzero(live | paced)
        kept = extra == 1 and slots.size > PRICED_PER_ROUND
        if kept:
            slots = run.to_price(slots, self._load)
        lost, slope, pace_lost, pace_left = self._price(now, slots, v0, v1)
        if not kept:  # every one priced now
            sub_live, sub_paced = live[slots], paced[slots]
            parts = (lost[sub_live], slope[sub_live], left_all[live])
            pace = (pace_lost[sub_paced], pace_left[sub_paced])
        else:  # kept, and read back for every one
            run.lost[slots], run.slope[slots] = lost, slope
            run.pace_lost[slots], run.pace_left[slots] = pace_lost, pace_left
            run.priced_at[slots], run.priced_load[slots] = now, self._load
            parts = (run.lost[live], run.slope[live], left_all[live])
            since = now - run.priced_at[paced]
            pace = (run.pace_lost[paced], np.maximum(run.pace_left[paced] - since, 1e-3))
        losts, lefts, slopes = [], [], []
        if deadlines:
            losts.append(parts[0])
            lefts.append(parts[2])
            slopes.append(parts[1])
        n_deadlines = parts[0].size if deadlines else 0
        if paces:
            losts.append(pace[0])
            lefts.append(pace[1])
            slopes.append(np.zeros_like(pace[0]))  # a prefill's pause barely moves a mean pace
        lost_all = np.concatenate(losts)
        if not (lost_all.any() or (prefill and any(s.any() for s in slopes))):
            return None  # it costs them nothing: as if none ran (``_cost``)
        others = (self._load + self._seen_elsewhere) / self._load
        lost_all, left = lost_all * others, np.concatenate(lefts)
        slope_all = np.concatenate(slopes) * others if prefill else None
        mask = None
        if lost_all.size > n_deadlines:
            mask = np.arange(lost_all.size) >= n_deadlines
        return Exposure(lost_all, left, slope_all, mask)

    def _price(
        self, now: float, slots: np.ndarray, v0: float, v1: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For each of ``slots``: its deadline's chance lost to the load f(``v1``) over
        f(``v0``) and that loss per second put off (0 where it races no deadline), its
        pace's chance lost and the seconds it has left to run (0 where it has no pace)."""
        run = self._live
        made = run.made[slots]
        guess = np.isnan(made) & run.live[slots]  # no progress reported: the token clock
        if guess.any():
            clock = self._clock_now(now)
            made = np.where(guess, self.calibration * (clock - run.clock[slots]), made)
        made = np.fmax(made, 0.0)  # NaN (none reported, no clock): 0
        zeros = np.zeros(slots.size)
        lost, slope, pace_lost, pace_left = zeros, zeros, zeros, zeros
        left = run.due[slots] - now
        racing = run.e2e[slots] & (left > 0.0)
        has_pace = run.pace[slots] > 0.0
        if racing.any():
            idx, left = slots[racing], left[racing]
            run.refresh(idx, self._estimate_of, self.lengths.version)
            budgets = [v0 * left, v1 * left]
            prefill = self._prefill is not None
            if prefill:
                budgets.append(v1 * left * 0.75)
            sigma = self._cal.sigma
            if not has_pace.any() and run.beyond_reach(idx, made[racing], budgets, sigma):
                return lost, slope, pace_lost, pace_left
            chances = run.chances(idx, made[racing], np.stack(budgets), sigma)
            lost = zeros.copy()
            lost[racing] = np.maximum(chances[0] - chances[1], 0.0)
            if prefill:
                slope = zeros.copy()
                slope[racing] = (chances[1] - chances[2]) / (0.25 * left)
        if has_pace.any():
            p_lost, p_left = self._pace_exposure(now, slots[has_pace], made[has_pace], v0, v1)
            pace_lost, pace_left = zeros.copy(), zeros.copy()
            pace_lost[has_pace], pace_left[has_pace] = p_lost, p_left
        return lost, slope, pace_lost, pace_left

    def _pace_exposure(
        self, now: float, paced: np.ndarray, made: np.ndarray, v0: float, v1: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each paced running request's chance of keeping its TPOT limit at f(L) less at
        f(L + 1), and the seconds it has left to run. Its tokens to come (its expected
        length less what it made, at least one) must come within what its limit allows
        for its whole answer less the time its tokens after the first have taken so
        far; the pace they come at strays from the predicted by the speed's spread."""
        run = self._live
        rest = np.maximum(run.tokens[paced] - made, 1.0)
        since = run.first_at[paced]
        spent = np.where(np.isnan(since), 0.0, now - np.nan_to_num(since))
        allowed = (made + rest - 1.0) / run.pace[paced] - spent
        ok = allowed > 0.0
        need = rest / np.where(ok, allowed, 1.0)
        sigma = max(self._sigma, PACE_SIGMA)
        d0, d1 = self._decode_pace(v0), self._decode_pace(v1)
        kept0 = normal_cdf(np.log(d0 / need) / sigma)
        kept1 = normal_cdf(np.log(d1 / need) / sigma)
        return np.where(ok, np.maximum(kept0 - kept1, 0.0), 0.0), rest / d0

    def _estimate_of(self, key: Hashable) -> LengthEstimate | None:
        """The distribution a running request's key names (``Bookkeeping._start``)."""
        assert isinstance(key, tuple)
        return self.lengths.estimate(key[0], key[1])
