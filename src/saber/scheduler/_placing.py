"""What a pool of backends asks each one's scheduler (``saber.scheduler.pool._pool``).

Whether a request waiting elsewhere would be admitted here now (``pass_rule``,
``admissible``), what placing it here is worth (``placement_value``: its chance less
what it costs the requests here and those to come, the terms admission weighs), and
moving a waiting request from one backend's queue to run on another (``take``,
``start_taken``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from saber.scheduler._arrivals import Arrivals
from saber.scheduler._decide import Decide
from saber.scheduler._request import Decision, SchedRequest, Tier


def anything(_: SchedRequest) -> float:
    """A pass rule that every request passes (an idle engine's)."""
    return -math.inf


def never(_: SchedRequest) -> bool:
    """A hold rule that holds no request."""
    return False


class Placing(Decide):
    """A mixin of ``Scheduler``: its face to a pool."""

    _first_wait: float  # the last first token's wait (``first_token_wait``)

    def pass_rule(self, tier: Tier, now: float) -> Callable[[SchedRequest], float] | None:
        """The earliest deadline with which a request waiting in ``tier`` would be
        admitted here now, as a function of the request (to search another backend's
        queue with); None when none would be (paused, a policy that does not decide by
        chance, or demoted work while this HPQ waits)."""
        rules = self.move_rules(tier, now)
        return None if rules is None else rules[0]

    def move_rules(
        self, tier: Tier, now: float
    ) -> tuple[Callable[[SchedRequest], float], Callable[[SchedRequest], bool]] | None:
        """``pass_rule``, and whether a request that passes it would be held here: worth
        more admitted a little later (``_better_later``); both weigh the same costs,
        computed once."""
        if self.paused or self.policy.decide != "chance":
            return None
        credit = 0.0
        if tier is Tier.LOW:
            if len(self._hpq):
                return None
            credit = self.policy.late_value
        speed = self.predicted_speed(self._load + 1)
        if not self._load:
            return self._earliest_rule(now, speed, credit), never
        costs = self._costs_now(now, speed)
        rule = self._earliest_rule(now, speed, credit, costs)
        return rule, lambda req: self._better_later(req, now, speed, *costs)

    @property
    def first_token_wait(self) -> float:
        """Seconds a request started here now waits for its first token, as this
        backend last showed (the time to first token of the request that last made its
        first one, or the engine's mean over its last read, ``set_first_token_wait``;
        prefill behind long prompts, which f(L) does not carry); 0 idle."""
        return self._first_wait if self._load else 0.0

    def set_first_token_wait(self, seconds: float) -> None:
        """The engine's own mean time to first token over its last read of /metrics:
        every request's, streamed or not, whoever sent it (``progress`` sees only this
        scheduler's streams)."""
        if not 0.0 <= seconds < math.inf:
            raise ValueError(f"a wait for a first token is a finite number >= 0, not {seconds}")
        self._first_wait = seconds

    def has_room(self, req: SchedRequest) -> bool:
        """Room for ``req``'s sequences under max_concurrency and the budget."""
        return self._fits(req)

    def admissible(self, req: SchedRequest, now: float) -> bool:
        """Whether ``req``, were it waiting here, would be admitted by ``poll(now)``."""
        rule = self.pass_rule(req.tier, now)
        if rule is None or not self._fits(req) or req.due < rule(req):
            return False
        return req.seqs == 1 or self._worth(req, now)

    def placement_value(self, req: SchedRequest, now: float) -> float:
        """Requests on schedule that running ``req`` here from ``now`` is worth: its
        chance of its deadline at f(L + its sequences), less what its sequences cost
        the running requests and those still to come (as admission counts them). Its
        decoding starts after ``first_token_wait``."""
        load = self._load + req.seqs
        speed = self.predicted_speed(load)
        if req.sla_kind == "ttft":
            ok = req.deadline >= self._first_token_rule(req, now, speed)
            chance = self._pace_chance(req, speed) if ok else 0.0
        else:
            left = max(req.due - now - self.first_token_wait, 0.0)
            on_time = req.first_by == math.inf or now + self._ttft_of(req, load) <= req.first_by
            chance = self._chance(req, speed * left) * self._pace_chance(req, speed) * on_time
            chance **= req.seqs
        if not self._load or self.policy.decide != "chance":
            return chance
        running, future = self._costs_now(now, speed)
        return chance - self._cost(req, speed, running, future) * req.seqs

    def set_arrival_share(self, share: float) -> None:
        """This scheduler sees ``share`` of the requests that arrive for its backend
        (1/M behind a balancer that splits clients evenly over M gateways): the
        requests still to come, whom one more sequence slows, are its own arrivals over
        ``share``."""
        if not 0.0 < share <= 1.0:
            raise ValueError(f"an arrival share must be within (0, 1], not {share}")
        self._arrival_share = share

    def join_pool(self, arrivals: Arrivals) -> None:
        """Count the pool's arrivals (one ``Arrivals`` that every backend of the pool
        observes into), not only those placed here: a request placed on one backend
        may run on another, so the requests still to come here are the pool's, in this
        backend's share of them (``set_place_share``)."""
        self._arrivals = arrivals

    def set_place_share(self, share: float) -> None:
        """Of the requests arriving for the pool, the share that runs here (its share
        of the pool's recent starts)."""
        self._place_share = share

    def most_urgent_waiting(
        self, tier: Tier, earliest: Callable[[SchedRequest], float] = anything
    ) -> SchedRequest | None:
        """The waiting request of ``tier`` with the earliest deadline among those whose
        deadline is at least ``earliest(request)`` (another backend's ``pass_rule``)."""
        return self._queue(tier).most_urgent_passing(earliest)

    def take(self, req_id: str) -> SchedRequest | None:
        """A waiting request leaves, to run on another backend of a pool (no outcome:
        it is not done with). None if it is not waiting here."""
        return self._hpq.remove(req_id) or self._lpq.remove(req_id)

    def start_taken(self, req: SchedRequest, now: float) -> Decision:
        """Run at once a request taken from another backend's queue, in its tier."""
        self._tick(now)
        self._kinds[req.task] = req.sla_kind
        return self._start(req, now, req.tier)
