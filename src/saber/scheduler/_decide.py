"""The decision rule: when a waiting request is admitted, demoted or expired.

This part of ``Scheduler`` is Algorithm 1 and what replaced its mean: a request's
chance of finishing in time (its need at a chance, the earliest deadline that passes
at f(L + 1)) against what one more sequence costs (``saber.scheduler._costs``), the
paper's protection of running requests, and the demotion and expiry times, rebuilt
when the speed or the needs move.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from saber.scheduler._costs import NO_FUTURE, Costs, Future
from saber.scheduler._due import DueTimes
from saber.scheduler._queues import TaskQueues
from saber.scheduler._request import Action, Decision, Outcome, SchedRequest, Tier
from saber.scheduler._running import Running

CHANCE_STEP = 0.02
"""The admission threshold is rounded up to this, so its quantiles are cached; a
request passing now waits only if it is worth this much more later."""
WAIT_SHARES = (0.125, 0.25, 0.5)
"""A request that passes is weighed as if admitted after these shares of the time it has
left (``_better_later``): shares of its own slack, so the same on any engine."""
RECHECK_SHARE = WAIT_SHARES[0] / 4
"""When the running requests' costs kept every waiting request out (or held the one that
passed), a poll that finds nothing changed (no arrival, finish, demotion, progress, new
speed or lengths, no arrival leaving the window its rate is taken over) prices them
again only once this share of the most urgent candidate's slack has passed: what moves
them meanwhile is time alone, slowly against a hold's shortest step. A pool polls every
backend at each event, most of them unchanged, and the scheduler's timer polls when
nothing else happened."""


def _step_up(p: float) -> float:
    """``p`` rounded up to CHANCE_STEP, so that its quantiles are cached."""
    return math.ceil(p / CHANCE_STEP - 1e-9) * CHANCE_STEP


class Decide(Costs):
    """Admission, demotion and expiry, from the chance of finishing in time or the mean.

    A mixin of ``Scheduler``, whose ``__init__`` sets the state declared here.
    """

    _kinds: dict[str, str]  # task -> the SLA kind its requests carry
    _rng: random.Random
    _demote_at: DueTimes  # when each waiting request of the HPQ is to be demoted
    _expire_at: DueTimes  # when each waiting request is to expire
    _last_protected: float
    # What the cheapest check read when it last found nothing (``_next_passing``), and
    # what the priced check read when it last did, until when that holds.
    _none_cheap: tuple[tuple[object, ...], float] | None
    _none_priced: tuple[tuple[object, ...], float, float] | None
    paused: bool  # admit nothing here: a pool's backend out of service (Scheduler)

    # -- when a waiting request is due -----------------------------------

    def _demotion_time(self, req: SchedRequest) -> float:
        """When ``req`` can no longer meet its SLO even at f(1): now, if its pace cannot;
        else when its first token, or its answer, could no longer be in time."""
        best = self.max_speed
        pace = self._pace_chance(req, best)
        if pace < self.policy.demote_below:
            return req.arrival
        if req.sla_kind == "ttft":
            return req.deadline - self._ttft_of(req, 1)
        if self.policy.decide == "chance":
            # The chance at f(1) falls below demote_below at this t.
            p = min(_step_up(self.policy.demote_below / pace), 1.0 - CHANCE_STEP)
            t = req.due - self._need(req, p) / best
        else:  # required speed tokens / (deadline - t) reaches f(1) at this t.
            t = req.due - req.tokens / best
        if req.first_by < math.inf:  # or its first token could no longer be in time
            t = min(t, req.first_by - self._ttft_of(req, 1))
        return t

    def chance_of(self, req: SchedRequest, now: float, load: float) -> float:
        """P(``req`` meets its SLO) if it ran from ``now`` at the calibrated f(``load``):
        its kind's effective length (``saber.scheduler._chance``) against its time left,
        its pace against its TPOT limit, and its first token against its TTFT limit.
        What the default policy decides with; ``docs/admission.md`` draws it."""
        speed = self.predicted_speed(load)
        if req.first_by < math.inf and now + self._ttft_of(req, int(load)) > req.first_by:
            return 0.0
        return self._chance(req, speed * (req.due - now)) * self._pace_chance(req, speed)

    def _first_token_rule(self, req: SchedRequest, now: float, speed: float) -> float:
        """The earliest deadline with which ``req`` can be admitted now, at per-request
        speed ``speed`` (that of L + 1): for a TTFT deadline, its first token in time
        and, with a ``useful_s``, its whole answer by then; else its answer at that
        speed."""
        if req.sla_kind != "ttft":
            return now + req.tokens / speed
        first = now + self._ttft_of(req, self.load + 1)
        known = self.tasks.get(req.task)
        if known is None or known.useful_s is None:
            return first
        # The whole answer by arrival + useful_s, i.e. by deadline + (useful_s - its TTFT).
        useful_after = known.useful_s - (req.deadline - req.arrival)
        return max(first, now + req.tokens / speed - useful_after)

    def _passes(self, req: SchedRequest, now: float, speed: float) -> bool:
        """Line 10's first half: the newcomer itself can make its deadline at L + 1."""
        if req.sla_kind == "ttft":
            return req.deadline >= self._first_token_rule(req, now, speed)
        return speed >= req.required_speed_at(now)

    def _expiry_time(self, req: SchedRequest) -> float | None:
        task = self.tasks.get(req.task)
        if task is None or task.useful_s is None:
            return None
        if self.policy.decide == "chance":
            need = self._need(req, self.policy.refuse_below)
        else:
            need = req.tokens
        return req.arrival + task.useful_s - req.prefill_s - need / self.max_speed

    def _rebuild_times(self, requeue: bool = False) -> None:
        """The demotion and expiry times afresh, one offset per group (``DueTimes``);
        ``requeue``: the tasks changed (a reload), so every waiting request anew."""
        self._none_cheap = self._none_priced = None  # the speed model, tasks or needs
        self._times_f1 = self.max_speed
        self._built_needs = {}
        if self.policy.decide == "chance":
            for queue in (self._hpq, self._lpq):
                for r in queue.latest_of_each_kind():
                    if r.kind not in self._built_needs:
                        self._built_needs[r.kind] = self._need(r, self.policy.demote_below)
        if requeue:
            self._demote_at, self._expire_at = DueTimes(), DueTimes()
            for r in self._hpq:
                self._demote_at.push(r, self._demotion_time(r))
            for r in self._waiting():
                self._expire_at.push(r, self._expiry_time(r))
            return
        self._demote_at.retime(self._demotion_time)
        self._expire_at.retime(self._expiry_time)

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
        some request could pass were they small. The check for that is skipped while
        nothing it reads has changed since it last found none: each kind's earliest
        deadline then only moves on with ``now``, so none would pass still (the
        rounds of a full engine with a long queue). When the costs kept them out, the
        same holds for a while (RECHECK_SHARE)."""
        speed = self.predicted_speed(self._load + 1)
        full: tuple[object, ...] | None = None  # what the priced check reads
        recheck = now
        if self._load and credit < CHANCE_STEP:
            lengths = self.lengths.version
            cheap = (id(queue), queue.version, self.load, speed, credit, self._sigma, lengths)
            last, priced = self._none_cheap, self._none_priced
            if last is not None and last[0] == cheap and now >= last[1]:
                return None
            full = self._priced_state(cheap)
            if priced is not None and priced[1] <= now < priced[2] and priced[0] == full:
                return None
            least = CHANCE_STEP - credit  # the cost of the cheapest request one could admit
            cheapest = queue.most_urgent_passing(
                lambda r: self._earliest(r, now, speed, None, NO_FUTURE, -least)
            )
            if cheapest is None:
                self._none_cheap = (cheap, now)
                return None
            recheck = now + RECHECK_SHARE * max(cheapest.due - now, 0.0)
        if not self._load or credit:
            return queue.most_urgent_passing(self._earliest_rule(now, speed, credit))
        costs = self._costs_now(now, speed)
        req = queue.most_urgent_passing(self._earliest_rule(now, speed, credit, costs))
        if req is not None and not self._better_later(req, now, speed, *costs):
            return req
        if full is not None:
            self._none_priced = (full, now, recheck)
        return None

    def _priced_state(self, state: tuple[object, ...]) -> tuple[object, ...]:
        """What the priced check reads beyond the cheap one's ``state``: the running
        requests' progress, the arrivals (the requests to come), the others' sequences
        and this backend's shares of a pool's arrivals."""
        return (
            *state,
            self._live.reports,
            self._arrivals.version,
            self._seen_elsewhere,
            self._arrival_share,
            self._place_share,
        )

    def _costs_now(self, now: float, speed: float) -> tuple[Running, Future]:
        """What one more sequence costs the running requests and those to come (once a
        round: O(running))."""
        running = self._exposure(now, 1) if self.policy.gain else None
        future = self._future(now, speed) if self.policy.future_weight else NO_FUTURE
        return running, future

    def _earliest_rule(
        self,
        now: float,
        speed: float,
        credit: float,
        costs: tuple[Running, Future] | None = None,
    ) -> Callable[[SchedRequest], float]:
        """The earliest deadline with which a waiting request passes now, as a function
        of the request, its costs to the running requests and those to come computed
        once (``costs``, else here)."""
        if not self._load:
            return lambda r: self._earliest(r, now, speed, None, NO_FUTURE)
        running, future = costs or self._costs_now(now, speed)
        # Costs of nothing leave a busy engine to requests with a chance of their SLA;
        # best effort (credit) runs at no cost whatever its chance.
        floor = 0.0 if credit else CHANCE_STEP
        return lambda r: self._earliest(r, now, speed, running, future, credit, floor)

    def _better_later(
        self, req: SchedRequest, now: float, speed: float, running: Running, future: Future
    ) -> bool:
        """Whether ``req``, which passes now, is worth more admitted a while later: a
        hold is a delay, not a sacrifice, when the request keeps its chance while the
        running requests it would slow move on and fewer arrivals remain (a long answer
        with time to spare, in a burst of short ones). Its worth, chance less cost, is
        weighed after each share WAIT_SHARES of the time it has left."""
        slack = req.due - now
        if req.sla_kind != "e2e" or slack <= 0:
            return False

        pace = self._pace_chance(req, speed)
        first = now + self._ttft_of(req, self._load + 1) if req.first_by < math.inf else -math.inf

        def worth(delay: float) -> float:
            if first + delay > req.first_by:
                return -math.inf  # its first token would be late
            chance = (self._chance(req, speed * (slack - delay)) * pace) ** req.seqs
            return chance - self._cost(req, speed, running, future, delay=delay) * req.seqs

        now_worth = worth(0.0) + CHANCE_STEP
        return any(worth(slack * share) > now_worth for share in WAIT_SHARES)

    def _earliest(
        self,
        req: SchedRequest,
        now: float,
        speed: float,
        running: Running,
        future: Future,
        credit: float = 0.0,
        floor: float = 0.0,
    ) -> float:
        """The earliest deadline (``due``, for its decoding) with which a request of
        ``req``'s kind passes now: its chance at ``speed`` clears what it costs, the loss
        ``running`` to the running requests plus that to the requests arriving while it
        runs (``future``, ``saber.scheduler._costs.overlap``)."""
        if req.sla_kind == "ttft":
            first = self._first_token_rule(req, now, speed)
            if req.pace:  # its own pace against what it costs the running ones' paces
                cost = self._cost(req, speed, running, NO_FUTURE, -credit, paces=True)
                if self._pace_chance(req, speed) < max(cost * req.seqs, floor):
                    return math.inf
            return first
        p = max(self._cost(req, speed, running, future, -credit) * req.seqs, floor)
        pace = self._pace_chance(req, speed)
        if p > pace * (1.0 - CHANCE_STEP):
            return math.inf  # it cannot win more than it costs
        earliest = -math.inf if p <= 0.0 else now + self._need(req, _step_up(p / pace)) / speed
        if req.first_by < math.inf:  # and its first token by its TTFT limit
            earliest = max(
                earliest, now + self._ttft_of(req, self._load + 1) + req.due - req.first_by
            )
        return earliest

    def _worth(self, req: SchedRequest, now: float) -> bool:
        """A request of several sequences, judged at the load it brings."""
        speed = self.predicted_speed(self._load + req.seqs)
        chance = (
            self._chance(req, speed * (req.due - now)) * self._pace_chance(req, speed)
        ) ** req.seqs
        floor = self.policy.demote_below
        loss = self._loss(now, req.seqs) if self.policy.gain and self._load else 0.0
        return chance >= max(floor, loss)

    # -- decisions from the mean (the paper's, and the closed loop's) ------

    def _admit_mean(self, now: float) -> list[Decision]:
        out: list[Decision] = []
        cap = self.policy.max_concurrency
        protected = self._protected_speed() if self.policy.protection == "frozen" else 0.0
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
            req = self._hpq.most_urgent_passing(lambda r: self._first_token_rule(r, now, predicted))
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

    # -- demotion and expiry -----------------------------------------------

    def _demote_due(self, now: float) -> list[Decision]:
        out = []
        for req_id in self._demote_at.pop_due(now, self._hpq.__contains__):
            req = self._hpq.get(req_id)
            assert req is not None
            due = self._demotion_time(req)
            if due > now:  # the calibration rose since: not yet
                self._demote_at.later(req, due)
                continue
            self._hpq.remove(req_id)
            req.tier = Tier.LOW
            req.demoted_at = now
            self._lpq.push(req)
            out.append(Decision(Action.DEMOTE, req, now, Tier.LOW))
        return out

    def _expire_due(self, now: float) -> list[Decision]:
        out = []
        for req_id in self._expire_at.pop_due(now, self.is_queued):
            req = self._hpq.get(req_id) or self._lpq.get(req_id)
            assert req is not None
            due = self._expiry_time(req)
            if due is not None and due > now:  # the calibration rose since: not yet
                self._expire_at.later(req, due)
                continue
            self._hpq.remove(req_id) or self._lpq.remove(req_id)
            out.append(self._leave_queued(req, now, Outcome.REJECTED_EXPIRED))
        return out
