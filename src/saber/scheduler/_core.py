"""The admission core: two-tier queues and the paper's Algorithm 1, closed-loop. Pure.

Every public method takes ``now`` from its caller and returns decisions; there
is no clock, no I/O and no asyncio here, so the gateway (wall clock) and the
simulator (virtual clock) drive the very same object.

``Scheduler`` is its state and its events; the rest comes in layers, each a mixin
that builds on the one below: ``_speed_model`` (f(L), its calibration and the
clocks), ``_bookkeeping`` (the queues, the running set and the load) and
``_decide`` (the decision rule). One object, so the hot path calls methods, not
parts.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from saber.config import TaskType
from saber.scheduler._arrivals import Arrivals
from saber.scheduler._calibration import Calibration, Observation
from saber.scheduler._chance import Needs, rounded_sigma
from saber.scheduler._due import DueTimes
from saber.scheduler._placing import Placing
from saber.scheduler._policy import Policy
from saber.scheduler._queues import TaskQueues
from saber.scheduler._request import Action, Decision, Kind, Outcome, SchedRequest, Tier
from saber.scheduler._running import RunningSet
from saber.scheduler._speed_model import SpeedFn, TTFTFn
from saber.scheduler.lengths._task_lengths import TaskLengths

__all__ = ["Observation", "Scheduler", "SpeedFn", "TTFTFn"]


class Scheduler(Placing):
    """SABER's admission control over per-task high- and low-priority queues.

    A request arrives (``offer``) in its task's HPQ. It is admitted when f(L+1)
    meets its required speed (tokens over time left) and the policy's protection
    of running requests allows; it is demoted to its task's LPQ when its required
    speed passes f(1), the fastest the backend ever goes; it expires (is rejected)
    when, even at f(1), it could no longer finish within its task's ``useful_s``.

    Closed loop (beyond the paper, each a ``Policy`` knob): ``progress`` reports a
    running request's generated tokens; ``finish`` reports its length, which
    teaches the task's expected length (``learn_lengths``: ``lengths``, which
    ``request_for`` reads for each new request) and, against the
    speed the model predicted for it, the calibration of f(L) (``calibrate``).
    Finished requests also yield ``observations`` for refitting f(L) itself
    (``set_speed_model``), which the driver does off the hot path.

    Without live progress the scheduler estimates it with a token clock that
    advances by f(L) per second while the load is L: a request admitted when the
    clock read c has made about clock - c tokens.

    A task with a TTFT SLA (CATO) is judged on its first token: it is admitted
    while ``ttft(prompt tokens, L + 1)`` still lands before its deadline and, if
    the task has a ``useful_s``, its whole answer can still be made by then at
    f(L + 1) (the first token is cheap; the rest still takes the engine's time, so
    this keeps a flood of completions from running the load up). It is demoted when
    even ``ttft(P, 1)`` would miss, and never protected. ``ttft`` is the profile's
    fit; without one, one token at f(L) stands in for it.
    """

    def __init__(
        self,
        speed: SpeedFn,
        policy: Policy | None = None,
        *,
        tasks: Mapping[str, TaskType] | Iterable[TaskType] = (),
        ttft: TTFTFn | None = None,
        seed: int = 0,
        speed_sigma: float | None = None,
        lengths: TaskLengths | None = None,
        prefill: tuple[float, float] | None = None,
    ) -> None:
        """``lengths``: what the tasks' answer lengths are learned into; the backends of
        a pool share one (a task's lengths do not depend on where it runs). ``prefill``:
        the profile's (seconds per prompt token of an idle engine, prompt tokens per
        generated token of its requests), which the policy's ``prefill`` counts."""
        self.policy = policy or Policy()
        self._ttft_fn = ttft
        self._prefill = prefill if self.policy.prefill and self.policy.decide == "chance" else None
        self._kinds: dict[str, str] = {}  # task -> the SLA kind its requests carry
        task_list = list(tasks.values()) if isinstance(tasks, Mapping) else list(tasks)
        self.tasks: dict[str, TaskType] = {t.name: t for t in task_list}
        if lengths is None:
            lengths = TaskLengths(
                task_list,
                learn=self.policy.learn_lengths,
                condition=self.policy.condition_lengths,
            )
        self.lengths = lengths
        self._rng = random.Random(seed)
        self._hpq = TaskQueues()
        self._lpq = TaskQueues()
        self._running: dict[str, SchedRequest] = {}
        self._live = RunningSet()
        self._load = 0  # sequences running: the sum of their seqs
        self._seen_elsewhere = self._elsewhere = 0  # at the backend, not admitted here
        # Admit nothing (a pool's backend out of service while others serve): requests
        # wait, are demoted and expire as ever, and the pool moves them elsewhere.
        self.paused = False
        self._budget: tuple[int, float] | None = None  # set_budget: several gateways
        self._spent: deque[tuple[float, int]] = deque()
        self._high_running = 0
        self._demote_at = DueTimes()  # of the HPQ
        self._expire_at = DueTimes()  # of both queues
        self._protect: list[tuple[float, str]] = []  # (-required speed, id) of running HPQ requests
        # The token clock (tokens one request makes at the raw f(L)) and the load
        # clock (the integral of L), both since the start.
        self._clock = 0.0
        self._area = 0.0
        self._clock_at: float | None = None
        self._at_admit: dict[str, tuple[float, float]] = {}  # id -> (clock, area)
        self._last_protected = 0.0
        self._first_wait = 0.0  # behind Placing.first_token_wait
        # speed_sigma: the profile's own error (relative), the spread's prior.
        self._cal = Calibration(enabled=self.policy.calibrate, sigma=speed_sigma)
        self._sigma = rounded_sigma(self._cal.sigma)
        self.needs = Needs()
        self._built_needs: dict[Kind, float] = {}  # kind -> need when timed
        self._arrivals = Arrivals()
        self._arrival_share = 1.0
        self._place_share = 1.0
        self.recent: deque[Decision] = deque(maxlen=100)
        self.set_speed_model(speed)

    def reconfigure(
        self,
        tasks: Mapping[str, TaskType],
        *,
        max_concurrency: int | None,
        queue_cap: int | None,
    ) -> None:
        """New task types and caps (a reload). Requests already here keep the deadline
        they arrived with; useful_s changes their expiry; a task type that is gone
        still drains from the queues. Call ``poll`` next: a higher cap may admit."""
        for task in tasks.values():
            self.lengths.add(task)
        self.tasks = {**self.tasks, **tasks}
        self.policy = dataclasses.replace(
            self.policy, max_concurrency=max_concurrency, queue_cap=queue_cap
        )
        self.needs.forget()
        self._rebuild_times(requeue=True)

    # -- events ----------------------------------------------------------

    def offer(self, req: SchedRequest, now: float) -> list[Decision]:
        """A request arrives. Returns what happened to it and to any other."""
        if self.is_queued(req.id) or req.id in self._running:
            raise ValueError(f"request {req.id} is already known to the scheduler")
        cap = self.policy.max_concurrency
        if req.seqs < 1 or (cap is not None and req.seqs > cap):
            raise ValueError(
                f"request {req.id} runs {req.seqs} sequences; max_concurrency is {cap}"
            )
        self.price_prefill(req)
        demote_at = self._demotion_time(req)  # may raise: before any state changes
        expire_at = self._expiry_time(req)
        self._tick(now)
        limit = self.policy.queue_cap
        if limit is not None and self.queued(req.task) >= limit:
            rejected = self._leave_queued(req, now, Outcome.REJECTED_QUEUE_FULL)
            self.recent.append(rejected)
            return [rejected, *self.poll(now)]
        self._kinds[req.task] = req.sla_kind
        self._arrivals.observe(req, now)
        self._hpq.push(req)
        self._demote_at.push(req, demote_at)
        self._expire_at.push(req, expire_at)
        return self.poll(now)

    def poll(self, now: float) -> list[Decision]:
        """Demote what can no longer make its deadline, reject what can no longer be
        useful, then admit whatever the policy allows at ``now``."""
        self._tick(now)
        self._arrivals.expire(now)
        out = self._demote_due(now)
        out += self._expire_due(now)
        out += self._admit(now)
        self.recent.extend(out)
        return out

    def progress(self, req_id: str, tokens: int, now: float) -> None:
        """A running request has generated ``tokens`` so far (a stream's count).
        Cheap enough for every frame; a count that goes backwards is ignored."""
        req = self._running.get(req_id)
        if req is not None and (req.generated is None or tokens > req.generated):
            req.generated = tokens
            if tokens > 0 and req.first_token_at is None:
                req.first_token_at = now
                if req.admitted_at is not None:  # always, for a running request
                    self._first_wait = now - req.admitted_at
            self._live.progress(req_id, tokens, req.first_token_at)

    def finish(
        self,
        req_id: str,
        now: float,
        tokens: int | None = None,
        prompt_tokens: int | None = None,
    ) -> Outcome | None:
        """A running request completed, having generated ``tokens`` (None: not
        known), its prompt counted as ``prompt_tokens`` by the engine (None: not
        reported). Returns None if it was not running, so a caller that reports twice
        releases the slot only once."""
        req = self._running.get(req_id)
        if req is None:
            return None
        if tokens is None:
            tokens = req.generated
        self.lengths.observe_prompt(req.carried, prompt_tokens)
        if tokens:
            self._learn(req, now, tokens)
        self._release(req_id, now)
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
        """The next time ``poll`` has work even if no request arrives or ends: the
        earliest demotion or expiry of a waiting request, and, while requests wait, the
        moment arrivals fall quiet (a request held back for what the requests still to
        come would lose may pass then: seen on vLLM, a long request held a minute beside
        one other while nothing else came)."""
        quiet = budget = None
        if self.queued():
            budget = self.budget_due()
            if self.policy.decide == "chance" and self.policy.future_weight:
                quiet = self._arrivals.quiet_at()
        times = [
            t
            for t in (
                self._demote_at.peek(self._hpq.__contains__),
                self._expire_at.peek(self.is_queued),
                quiet,
                budget,
            )
            if t is not None
        ]
        return min(times) if times else None

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
                "max": self.max_speed,
            },
            "calibration": round(self.calibration, 4),
            "speed_spread": round(self.speed_sigma, 4),
            "decide": self.policy.decide,
            "protected_speed": (
                self._protected_speed()
                if self.policy.protection == "frozen"
                else self._last_protected
            ),
            "queues": {
                name: {"high": self._hpq.depth(name), "low": self._lpq.depth(name)}
                for name in names
            },
            "lengths": self.lengths.summary(),
            "prompt_size": self.lengths.prompts.summary(),
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
