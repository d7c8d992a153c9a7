"""The scheduler's belief about the backend's speed: f(L), scaled by its calibration.

This part of ``Scheduler`` owns the speed model and the TTFT fit, their calibration
and spread as finished requests teach them (``_learn``), and the token and load
clocks that tell what the raw f(L) predicted for a request's run (``_at_admit``: the
clocks when it was admitted). Everything the decision rule reads of the speed comes
from here; changing it is what makes the demotion and expiry times stale.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from saber.config import TaskType
from saber.scheduler._calibration import Calibration, Observation
from saber.scheduler._chance import rounded_sigma
from saber.scheduler._policy import Policy
from saber.scheduler._request import SchedRequest
from saber.scheduler.lengths._task_lengths import TaskLengths

SpeedFn = Callable[[float], float]
TTFTFn = Callable[[float, float], float]
"""Time to first token (s) of a request with this many prompt tokens at this load."""

PREFILL_MIN = 0.01
"""A prefill beyond what f(L) counts that is less than this share of a request's SLA is
left out (``price_prefill``)."""
REBUILD_AT = 0.1
"""Demotion and expiry times are recomputed when the calibrated f(1) has fallen this
much since they were, or what a task's requests need has grown this much (they come
due later than they should). A change the other way needs nothing: each time is
checked again, at the state of the moment, when it comes due."""


class SpeedModel:
    """f(L), the TTFT fit, their calibration and the clocks they are measured by.

    A mixin of ``Scheduler``, whose ``__init__`` sets the state declared here; the
    decision rule (``saber.scheduler._decide``) supplies the times it rebuilds.
    """

    policy: Policy
    tasks: dict[str, TaskType]
    lengths: TaskLengths
    _ttft_fn: TTFTFn | None
    _prefill: tuple[float, float] | None  # (s per prompt token, prompt per output token)
    _cal: Calibration
    _sigma: float
    # The token clock (tokens one request makes at the raw f(L)) and the load clock
    # (the integral of L), both since the start, and their readings at each admission.
    _clock: float
    _area: float
    _clock_at: float | None
    _at_admit: dict[str, tuple[float, float]]
    # What the clocks run at: the running requests and their sequences (the L).
    _running: dict[str, SchedRequest]
    _load: int
    # Sequences at the backend that this scheduler did not admit (other gateways', as
    # last seen), and that plus a headroom for what they admitted since: f is read at
    # L + the latter.
    _seen_elsewhere: int
    _elsewhere: int
    _times_f1: float  # the calibrated f(1) when the times were last computed

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

    def set_ttft(self, ttft: TTFTFn | None, prefill: tuple[float, float] | None = None) -> None:
        """Swap the TTFT fit and the prefill (a reload brought another profile)."""
        self._ttft_fn = ttft
        self._prefill = prefill if self.policy.prefill and self.policy.decide == "chance" else None
        self._rebuild_times()

    def price_prefill(self, req: SchedRequest) -> None:
        """Set ``req.prefill_s``: its prompt's prefill beyond what f(L) counts for a
        request of its expected length. f(L) is a speed over each profiled request's
        whole time, so it counts ``per_output`` prompt tokens of prefill per generated
        token; a prompt longer than that takes ``per_token`` s per token more, first.
        A prompt of unknown size is its task's mean. Under PREFILL_MIN of the task's
        SLA it is nothing (a kind of its own for every prompt would cost more than it
        tells), and it is rounded to quarter doublings, for the same reason."""
        req.prefill_s = 0.0
        if self._prefill is None or req.sla_kind != "e2e":
            return
        per_token, per_output = self._prefill
        prompt = req.carried.prompt_tokens
        if prompt is None:
            task = self.tasks.get(req.task)
            if task is None:
                return
            prompt = float(task.mean_input_tokens)
        excess = per_token * (prompt - per_output * req.tokens)
        if excess <= PREFILL_MIN * (req.deadline - req.arrival):
            return
        req.prefill_s = 0.001 * 2.0 ** (round(4.0 * math.log2(excess / 0.001)) / 4.0)

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
        """f(L), calibrated: what one request is expected to get at load L of its own
        (with what runs there from elsewhere)."""
        at = load + self._elsewhere
        if type(at) is int:  # the load itself, as every decision asks: cached
            return self.calibration * self._f(at)
        return self.calibration * float(self._speed(max(1.0, at)))

    def set_elsewhere(self, seen: int, headroom: int, now: float) -> None:
        """The backend also runs ``seen`` sequences that this scheduler did not admit
        (other gateways in front of it, as last scraped), and may run ``headroom`` more
        (what they admitted since): every prediction reads f at L + both. An engine
        that runs nothing, here or elsewhere, is still never kept idle."""
        self._tick(now)
        self._seen_elsewhere = max(int(seen), 0)
        self._elsewhere = self._seen_elsewhere + max(int(headroom), 0)

    @property
    def elsewhere(self) -> tuple[int, int]:
        """Sequences at the backend that are not this scheduler's: as last seen, and
        with the headroom added (``set_elsewhere``)."""
        return self._seen_elsewhere, self._elsewhere

    @property
    def engine_idle(self) -> bool:
        """Nothing runs at the backend, of this scheduler's or, as last seen, others'."""
        return not self._running and not self._seen_elsewhere

    def _f(self, load: int) -> float:
        """The raw f at an integer load, cached: the value rule asks for many loads."""
        speed = self._f_at.get(load)
        if speed is None:
            speed = self._f_at[load] = float(self._speed(max(1.0, load)))
        return speed

    def kept_share(self, load: int) -> float:
        """f(L) / f(1) on the backend's own curve: the share of its solo speed that one
        request keeps at load L (with what runs there from elsewhere). The calibration
        cancels, and so does the luck of single requests (``max_speed`` is floored by
        the fastest one seen lately): twin backends at the same load keep the same
        share."""
        return self._f(load + self._elsewhere) / self._f1_raw

    @property
    def solo_speed(self) -> float:
        """f(1) on the backend's own curve, uncalibrated: what its profile says one
        request alone gets (the luck of single requests does not move it)."""
        return self._f1_raw

    @property
    def max_speed(self) -> float:
        """f(1), calibrated: the fastest the backend can serve one request. Never below
        the fastest request seen lately (no request runs faster than a lone one), so
        an engine that seemed slow while busy is not predicted too slow when idle."""
        return max(self.calibration * self._f1_raw, self._cal.fastest)

    def _ttft_of(self, req: SchedRequest, load: int) -> float:
        """Predicted time to first token of ``req`` at ``load``: the TTFT fit at its
        prompt's size (its task's mean prompt where that is not known); without a fit,
        one token at f(L)."""
        if self._ttft_fn is None:
            return 1.0 / self.predicted_speed(load)
        prompt = req.carried.prompt_tokens
        if prompt is None:
            known = self.tasks.get(req.task)
            prompt = known.mean_input_tokens if known is not None else 0
        return float(self._ttft_fn(prompt, load))

    # -- learning from what finished (beyond the paper) -----------------

    def _learn(self, req: SchedRequest, now: float, tokens: int) -> None:
        self._tick(now)
        self.lengths.observe(req.task, tokens // req.seqs or 1, req.cap, req.carried)
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

    # -- the token and load clocks --------------------------------------

    def _tick(self, now: float) -> None:
        """Advance the clocks to ``now`` at the load that held since the last event."""
        if self._clock_at is not None and now > self._clock_at and self._running:
            dt = now - self._clock_at
            self._clock += self._f(self._load + self._elsewhere) * dt
            self._area += (self._load + self._elsewhere) * dt
        if self._clock_at is None or now > self._clock_at:
            self._clock_at = now

    def _left(self, req: SchedRequest, now: float) -> float:
        """Tokens a running request still has to generate: from its streamed count when
        the relay reports one, else from the token clock."""
        if req.generated is not None:
            return self.lengths.remaining(req.task, req.generated, req.cap, req.tokens, req.dist)
        return req.tokens - self._made(req, now)

    def _made(self, req: SchedRequest, now: float) -> float:
        """Tokens a running request that reports nothing has made by ``now``, by the
        token clock (calibrated)."""
        return self.calibration * (self._clock_now(now) - self._at_admit[req.id][0])

    def _clock_now(self, now: float) -> float:
        """The token clock (tokens one request has made since the start, uncalibrated),
        run forward to ``now``."""
        if self._clock_at is not None and now > self._clock_at:
            return self._clock + self._f(self._load + self._elsewhere) * (now - self._clock_at)
        return self._clock

    # -- what the decision rule supplies ---------------------------------

    def _rebuild_times(self, requeue: bool = False) -> None:
        """Recompute the demotion and expiry times (``Decide``): the speed changed."""
        raise NotImplementedError

    def _needs_grew(self, task: str) -> bool:
        """Whether what ``task``'s waiting requests need has outgrown their times
        (``Costs``)."""
        raise NotImplementedError
