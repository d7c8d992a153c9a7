"""The virtual-time simulator: static runs, runs behind a scheduler, and speed."""

from __future__ import annotations

import heapq

import pytest

from saber.config import load_tasks, load_workloads
from saber.engine import Engine, get_preset
from saber.scheduler import Action, Decision, Policy, SchedRequest, Scheduler, TaskLengths, Tier
from saber.sim import simulate
from saber.workload import TraceRequest, generate_trace

TASKS = load_tasks()
WORKLOADS = load_workloads(tasks=TASKS)
PAPER = get_preset("paper")


def trace(workload: str = "W3", rps: float = 10.0, n: int = 300, seed: int = 0):
    return generate_trace(WORKLOADS[workload], TASKS, rps=rps, n=n, seed=seed)


class DelayScheduler:
    """Admits every request ``delay`` seconds after it arrives, using wake-ups;
    demotes (then admits) task ``slow`` and rejects task ``drop``."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.due: list[tuple[float, str, SchedRequest]] = []
        self.finished: list[tuple[str, float]] = []
        self.times: list[float] = []

    def offer(self, req: SchedRequest, now: float) -> list[Decision]:
        self.times.append(now)
        if req.task == "drop":
            return [Decision(Action.REJECT, req, now)]
        heapq.heappush(self.due, (now + self.delay, req.id, req))
        out = [Decision(Action.DEMOTE, req, now)] if req.task == "slow" else []
        return out + self.poll(now)

    lengths = TaskLengths()

    def progress(self, req_id: str, tokens: int, now: float) -> None:
        pass

    def poll(self, now: float) -> list[Decision]:
        self.times.append(now)
        out = []
        while self.due and self.due[0][0] <= now:
            _, _, req = heapq.heappop(self.due)
            out.append(Decision(Action.ADMIT, req, now))
        return out

    def finish(
        self, req_id: str, now: float, tokens: int | None = None, prompt_tokens: int | None = None
    ) -> None:
        self.times.append(now)
        self.finished.append((req_id, now))

    def next_wakeup(self) -> float | None:
        return self.due[0][0] if self.due else None


def test_static_run_serves_every_request_once_within_the_seat_limit():
    reqs = trace(n=200)
    res = simulate(reqs, Engine(PAPER, max_num_seqs=20), tasks=TASKS)
    assert [r.id for r in res.records] == [r.id for r in reqs]
    assert res.max_running == 20 and not res.unfinished
    by_id = {r.id: r for r in reqs}
    for rec in res.records:
        assert rec.output_tokens == by_id[rec.id].output_tokens
        assert rec.admitted_at == rec.arrival <= rec.started_at
        assert rec.started_at < rec.first_token_at <= rec.finished_at
        assert rec.met_sla == (rec.e2e <= TASKS[rec.task].sla_s)
        assert not rec.rejected and not rec.demoted
    assert res.steps > 0 and 0 < res.goodput() < 1


def test_lone_request_takes_one_prefill_step_then_decode_steps():
    req = TraceRequest("only", "code_qna", 2.0, 186, 43, 43)
    res = simulate([req], Engine(PAPER), tasks=TASKS)
    (rec,) = res.records
    assert rec.started_at == 2.0 and res.steps == 43
    pairs = 186 * 187 // 2
    prefill = PAPER.step_time(num_seqs=1, tokens=186, context_tokens=186, attn_pairs=pairs)
    decodes = sum(PAPER.step_time(num_seqs=1, tokens=1, context_tokens=c) for c in range(187, 229))
    assert rec.ttft == pytest.approx(prefill)
    assert rec.e2e == pytest.approx(prefill + decodes)


def test_arrival_during_a_step_joins_at_the_next_boundary():
    reqs = [
        TraceRequest("a", "code_qna", 0.0, 100, 40, 40),
        TraceRequest("b", "code_qna", 0.05, 100, 5, 5),
    ]
    res = simulate(reqs, Engine(PAPER), tasks=TASKS)
    a, b = res.records
    assert b.started_at > 0.05
    assert b.started_at - 0.05 < 0.05  # within one step of arriving
    assert a.finished_at is not None and b.started_at < a.finished_at


def test_scheduler_decides_when_requests_reach_the_engine():
    reqs = [
        TraceRequest("a", "code_qna", 0.0, 50, 10, 10),
        TraceRequest("s", "slow", 0.1, 50, 10, 10),
        TraceRequest("x", "drop", 0.2, 50, 10, 10),
        TraceRequest("c", "code_qna", 3.0, 50, 10, 10),
    ]
    extra = {
        name: TASKS["code_qna"].model_copy(update={"name": name, "sla_s": 1.0})
        for name in ("slow", "drop")
    }
    sched = DelayScheduler(delay=0.5)
    res = simulate(reqs, Engine(PAPER), tasks={**TASKS, **extra}, scheduler=sched)
    recs = {r.id: r for r in res.records}
    assert recs["a"].admitted_at == pytest.approx(0.5) and recs["a"].started_at >= 0.5
    assert recs["s"].demoted and recs["s"].admitted_at == pytest.approx(0.6)
    assert recs["x"].rejected and recs["x"].finished_at is None and not recs["x"].met_sla
    assert recs["c"].admitted_at == pytest.approx(3.5)
    assert sorted(rid for rid, _ in sched.finished) == ["a", "c", "s"]
    assert all(recs[rid].finished_at == t for rid, t in sched.finished)
    assert sched.times == sorted(sched.times)  # the scheduler's clock never runs back
    assert len(res.records) == 4 and not res.unfinished


def test_the_admitting_tier_becomes_the_engine_priority():
    seen: dict[str, int] = {}

    class SpyEngine(Engine):
        def add(self, req):
            seen[req.id] = req.priority
            super().add(req)

    class Tiered(DelayScheduler):
        """Admits task ``slow`` from the low tier, as SABER does demoted work."""

        def poll(self, now):
            low = Tier.LOW
            return [
                Decision(d.action, d.request, d.at, low if d.request.task == "slow" else d.tier)
                for d in super().poll(now)
            ]

    reqs = [
        TraceRequest("a", "code_qna", 0.0, 50, 10, 10),
        TraceRequest("s", "slow", 0.1, 50, 10, 10),
        TraceRequest("c", "code_qna", 0.2, 50, 10, 10),
    ]
    tasks = {**TASKS, "slow": TASKS["code_qna"].model_copy(update={"name": "slow"})}
    engine = SpyEngine(PAPER, scheduling_policy="priority")
    res = simulate(reqs, engine, tasks=tasks, scheduler=Tiered(delay=0.5))
    assert seen == {"a": 0, "s": 1, "c": 0}
    assert not res.unfinished


def test_the_scheduler_is_told_the_true_length_only_when_max_tokens_is_trusted():
    seen = {}

    class Spy(DelayScheduler):
        def offer(self, req, now):
            seen[req.id] = req.tokens
            return super().offer(req, now)

    reqs = [TraceRequest("a", "code_qna", 0.0, 50, 200, 256)]
    simulate(reqs, Engine(PAPER), tasks=TASKS, scheduler=Spy(0.0), trust_max_tokens=True)
    assert seen == {"a": 256}
    simulate(reqs, Engine(PAPER), tasks=TASKS, scheduler=Spy(0.0))
    assert seen == {"a": TASKS["code_qna"].expected_tokens}


def test_with_saber_scheduler_every_request_is_accounted_for():
    reqs = trace("W1", rps=15, n=300, seed=3)
    f1 = PAPER.decode_speed(1, 700)

    def speed(load: float) -> float:
        return PAPER.decode_speed(max(1, round(load)), 700) if load >= 1 else f1

    sched = Scheduler(speed, Policy(window_size=4), seed=1)
    res = simulate(reqs, Engine(PAPER, max_num_seqs=256), tasks=TASKS, scheduler=sched)
    assert len(res.records) == 300 and not res.unfinished
    assert any(r.demoted for r in res.records)
    assert all(r.finished_at is not None for r in res.records if not r.rejected)
    assert sched.load == 0


def test_unknown_task_sla_and_duplicate_ids_are_refused():
    with pytest.raises(ValueError, match="unknown task"):
        simulate([TraceRequest("a", "mystery", 0.0, 5, 5, 5)], Engine(PAPER), tasks=TASKS)
    dup = [TraceRequest("a", "code_qna", 0.0, 5, 5, 5)] * 2
    with pytest.raises(ValueError, match="unique"):
        simulate(dup, Engine(PAPER), tasks=TASKS)


def test_empty_trace():
    res = simulate([], Engine(PAPER), tasks=TASKS)
    assert res.records == [] and res.goodput() == 0.0


def test_drift_slows_the_engine_from_its_time_on():
    from saber.engine import PRESETS

    reqs = [TraceRequest(f"r{i}", "code_qna", 10.0 * i, 100, 200, 256) for i in range(4)]
    steady = simulate(reqs, Engine(PAPER), tasks=TASKS)
    drifted = simulate(reqs, Engine(PAPER), tasks=TASKS, drift=[(15.0, PRESETS["paper-slow"])])
    before = [r.e2e for r in steady.records]
    after = [r.e2e for r in drifted.records]
    assert after[:2] == before[:2]  # the first two ran before the change
    assert all(a > 1.3 * b for a, b in zip(after[2:], before[2:], strict=True))


def test_refit_swaps_in_the_engines_real_curve():
    from saber.bench import profile_engine
    from saber.engine import PRESETS
    from saber.speed import LiveFit, fit_model

    model = fit_model("usl", *profile_engine(PAPER, WORKLOADS["W3"], TASKS, points=300))
    reqs = trace("W3", rps=4.0, n=1200, seed=9)
    sched = Scheduler(model, Policy.named("closed-loop"), tasks=TASKS, seed=0)
    fit = LiveFit(min_points=150, every=150)
    slow = Engine(PRESETS["paper-slow"], max_num_seqs=256)
    res = simulate(reqs, slow, tasks=TASKS, scheduler=sched, refit=fit)
    assert res.swaps and fit.swaps == len(res.swaps) and fit.refits >= fit.swaps
    assert sched.speed_model is not model
    # It found the slower engine where it ran (13 to 26 requests, none alone; 0.65-0.70
    # of the profile, within 2% of the slow engine's own fit). f(1), which no point
    # there tells, stays near the profile's (saber.speed._online.ANCHOR_ABOVE): on this
    # engine, 9 runs (W3 at 3, 4 and 6 req/s, 3 seeds) met 57.7% with it, 57.4% without.
    low, high = fit.last.loads
    for load in (low, (low + high) / 2, high):
        assert sched.speed_model(load) < 0.8 * model(load)
    with pytest.raises(ValueError, match="refit needs"):
        simulate(reqs, Engine(PAPER), tasks=TASKS, refit=LiveFit())
