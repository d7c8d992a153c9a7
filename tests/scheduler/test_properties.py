"""Random event sequences: nothing is lost, nothing is admitted twice, the load
stays within [0, cap], and every running request is released exactly once. The
machine runs for the paper's rule, line 10 read literally, the previous default
(decisions from mean lengths) and the default (from the chance of finishing in
time), which also never leaves the engine idle while a request waits."""

from __future__ import annotations

import dataclasses

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from saber.config import TaskType
from saber.scheduler import Action, Outcome, Policy, SchedRequest, Scheduler, Tier

TASKS = ["qna", "gen", "sum"]


def task_types(useful: float | None) -> list[TaskType]:
    return [
        TaskType(
            name=name,
            mean_input_tokens=100,
            mean_output_tokens=50,
            sla_s=0.2,
            max_tokens=400,
            useful_s=useful,
        )
        for name in TASKS
    ]


class SchedulerMachine(RuleBasedStateMachine):
    policy = Policy()

    @initialize(
        cap=st.one_of(st.none(), st.integers(1, 6)),
        window=st.integers(1, 5),
        queue_cap=st.one_of(st.none(), st.integers(0, 5)),
        useful=st.one_of(st.none(), st.floats(0.5, 5.0)),
        sigma=st.floats(0.0, 0.5),
        seed=st.integers(0, 2**16),
    )
    def setup(self, cap, window, queue_cap, useful, sigma, seed):
        self.cap = cap
        policy = dataclasses.replace(
            self.policy, window_size=window, max_concurrency=cap, queue_cap=queue_cap
        )
        self.s = Scheduler(
            lambda load: 100.0 / (1 + sigma * (load - 1)),
            policy,
            tasks=task_types(useful),
            seed=seed,
        )
        self.now = 0.0
        self.n = 0
        self.offered: set[str] = set()
        self.running: set[str] = set()
        self.admits: dict[str, int] = {}
        self.ended: dict[str, Outcome] = {}
        self.seqs_of: dict[str, int] = {}

    def apply(self, decisions):
        # The load each admission brought the scheduler to: admissions only add load
        # within one call, so count back from the load after it.
        load = self.s.load - sum(d.action is Action.ADMIT for d in decisions)
        for d in decisions:
            rid = d.request.id
            assert rid in self.offered
            assert rid not in self.ended, f"{rid} acted on after it left"
            if d.action is Action.ADMIT:
                load += d.request.seqs
                if d.tier is Tier.HIGH and self.policy.decide == "mean":
                    # Whatever the protection rule, an HPQ admission meets the
                    # admitted request's own required speed (line 10, first half).
                    assert d.request.required_speed <= self.s.predicted_speed(load) + 1e-9
                self.admits[rid] = self.admits.get(rid, 0) + 1
                self.seqs_of[rid] = d.request.seqs
                self.running.add(rid)
            elif d.action is Action.REJECT:
                assert rid not in self.running
                self.ended[rid] = d.outcome

    @rule(
        task=st.sampled_from(TASKS),
        tokens=st.integers(1, 400),
        sla=st.floats(0.2, 20.0),
        dt=st.floats(0.0, 1.0),
    )
    def offer(self, task, tokens, sla, dt):
        self.now += dt
        rid = f"r{self.n}"
        self.n += 1
        self.offered.add(rid)
        req = SchedRequest(rid, task, self.now, self.now + sla, tokens, seqs=self.seqs())
        self.apply(self.s.offer(req, self.now))

    def seqs(self) -> int:
        return 1

    @precondition(lambda self: self.running)
    @rule(data=st.data(), dt=st.floats(0.0, 2.0), tokens=st.one_of(st.none(), st.integers(1, 500)))
    def finish(self, data, dt, tokens):
        self.now += dt
        rid = data.draw(st.sampled_from(sorted(self.running)))
        outcome = self.s.finish(rid, self.now, tokens)
        assert outcome in (Outcome.SERVED, Outcome.SERVED_DEMOTED)
        assert self.s.finish(rid, self.now) is None  # released exactly once
        self.running.discard(rid)
        self.ended[rid] = outcome
        self.apply(self.s.poll(self.now))

    @precondition(lambda self: self.offered)
    @rule(data=st.data())
    def cancel(self, data):
        rid = data.draw(st.sampled_from(sorted(self.offered)))
        was_running = rid in self.running
        outcome = self.s.cancel(rid, self.now)
        if rid in self.ended:
            assert outcome is None
            return
        expected = Outcome.CANCELLED_RUNNING if was_running else Outcome.CANCELLED_QUEUED
        assert outcome is expected
        self.running.discard(rid)
        self.ended[rid] = outcome
        self.apply(self.s.poll(self.now))

    @rule()
    def wake(self):
        t = self.s.next_wakeup()
        if t is not None:
            self.now = t
        self.apply(self.s.poll(self.now))

    @invariant()
    def load_within_bounds(self):
        if not hasattr(self, "s"):
            return
        assert self.s.load >= 0
        if self.cap is not None:
            assert self.s.load <= self.cap
        assert self.s.load == sum(self.seqs_of.get(r, 1) for r in self.running)

    @invariant()
    def nothing_lost_nothing_twice(self):
        if not hasattr(self, "s"):
            return
        assert all(n == 1 for n in self.admits.values())
        queued = {r for r in self.offered if self.s.is_queued(r)}
        assert queued.isdisjoint(self.running)
        assert queued.isdisjoint(self.ended)
        assert self.running.isdisjoint(self.ended)
        assert queued | self.running | set(self.ended) == self.offered
        assert len(queued) == self.s.queued()

    @invariant()
    def wakeup_is_pending_work(self):
        if not hasattr(self, "s"):
            return
        t = self.s.next_wakeup()
        if t is not None:
            # Every rule ends with a poll, which handles all that was due: the next
            # wake-up is strictly later, and only queued requests can have one.
            assert t > self.now
            assert self.s.queued() > 0


class UnprotectedMachine(SchedulerMachine):
    policy = Policy(protection="none")


class MeanMachine(SchedulerMachine):
    """The previous default: deadline order, idle-only LPQ, calibration and learned
    lengths, fed live progress; decisions from the mean length."""

    policy = Policy.named("mean")

    @precondition(lambda self: self.running)
    @rule(data=st.data(), tokens=st.integers(0, 500))
    def progress(self, data, tokens):
        rid = data.draw(st.sampled_from(sorted(self.running)))
        self.s.progress(rid, tokens, self.now)
        self.apply(self.s.poll(self.now))


class ClosedLoopMachine(MeanMachine):
    """The default: decisions from the chance of finishing in time; requests of one to
    three sequences."""

    policy = Policy.named("closed-loop")

    @initialize(many=st.booleans())
    def sequences(self, many):
        self.many = many

    def seqs(self) -> int:
        if not getattr(self, "many", False):
            return 1
        return min(1 + self.n % 3, self.cap or 3)

    @invariant()
    def never_idle_while_a_request_waits(self):
        if hasattr(self, "s") and self.s.queued():
            assert self.s.load > 0


_SETTINGS = settings(max_examples=150, stateful_step_count=60, deadline=None)
TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = _SETTINGS
TestUnprotectedMachine = UnprotectedMachine.TestCase
TestUnprotectedMachine.settings = _SETTINGS
TestMeanMachine = MeanMachine.TestCase
TestMeanMachine.settings = _SETTINGS
TestClosedLoopMachine = ClosedLoopMachine.TestCase
TestClosedLoopMachine.settings = _SETTINGS
