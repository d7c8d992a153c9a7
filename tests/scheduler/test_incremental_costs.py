"""What keeps an event's cost from growing with the queue and the running set.

``DueTimes`` keeps demotion and expiry times per group of waiting requests, so a new
speed re-times the groups, not each request; ``Costs._exposure`` prices one more
sequence from each running request's last pricing, at most ``PRICED_PER_ROUND`` afresh
a round, prices them in one pass over one table of distributions (``RunningSet``), and
reads what a pricing found as prefix sums (``Exposure``). Each test fails if what it
checks is computed per request again wrongly: a group not moved, a request that left
still due, a pricing that never catches up, a chance not the request's own, a sum that
is not the one it replaced.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from saber.config import TaskType
from saber.scheduler import Action, Policy, SchedRequest, Scheduler
from saber.scheduler._chance import running_chance
from saber.scheduler._due import DueTimes
from saber.scheduler._running import PRICED_PER_ROUND, Exposure, RunningSet
from saber.scheduler.lengths._histogram import LengthEstimate


def req(rid: str, arrival: float, sla: float = 10.0, tokens: int = 50) -> SchedRequest:
    return SchedRequest(rid, "t", arrival, arrival + sla, tokens)


def drain(times: DueTimes, now: float, waiting: set[str]) -> list[str]:
    return list(times.pop_due(now, waiting.__contains__))


def test_due_times_give_each_group_in_time_order_and_skip_those_that_left():
    times = DueTimes()
    short = [req(f"s{i}", float(i), sla=5.0) for i in range(3)]  # due at arrival + 1
    long = [req(f"l{i}", 0.5 + i, sla=50.0) for i in range(3)]  # due at arrival + 2
    for r in short:
        times.push(r, r.arrival + 1.0)
    for r in long:
        times.push(r, r.arrival + 2.0)
    waiting = {r.id for r in short + long} - {"s1"}
    assert times.peek(waiting.__contains__) == 1.0
    assert drain(times, 2.9, waiting) == ["s0", "l0"]  # 1.0, 2.5; s1 (2.0) left
    assert times.peek(waiting.__contains__) == 3.0  # s2
    assert drain(times, 10.0, waiting) == ["s2", "l1", "l2"]
    assert times.peek(waiting.__contains__) is None


def test_retime_moves_a_whole_group_by_one_call_per_group():
    times = DueTimes()
    rs = [req(f"r{i}", float(i)) for i in range(1000)]
    for r in rs:
        times.push(r, r.arrival + 5.0)
    calls: list[str] = []

    def offset(r: SchedRequest) -> float:
        calls.append(r.id)
        return 1.0  # the speed fell: each is due 4 s sooner

    times.retime(offset)
    assert len(calls) == 1
    waiting = {r.id for r in rs}
    assert times.peek(waiting.__contains__) == 1.0
    assert drain(times, 3.5, waiting) == ["r0", "r1", "r2"]


def test_a_request_found_not_yet_due_puts_its_group_later():
    times = DueTimes()
    a, b = req("a", 0.0), req("b", 1.0)
    times.push(a, 1.0)
    times.push(b, 2.0)
    waiting = {"a", "b"}
    assert drain(times, 1.0, waiting) == ["a"]
    times.later(a, 4.0)  # checked: due at 4 (the calibration rose), and b with it at 5
    assert times.peek(waiting.__contains__) == 4.0
    assert drain(times, 4.5, waiting) == ["a"]
    assert times.peek(waiting.__contains__) == 5.0


def test_a_group_that_is_never_due_holds_nothing():
    times = DueTimes()
    times.push(req("x", 0.0), None)
    assert times.peek(lambda _: True) is None
    assert times._groups == {}


def test_a_fallen_speed_demotes_the_whole_queue_on_time_without_a_pass_per_request():
    """End to end through the scheduler: a queue of one kind, a calibration that falls
    (answers come in at half the predicted speed), and every waiting request is demoted
    at the time its own demotion time gives, as computed afresh for it."""
    tasks = [
        TaskType(
            name="t",
            mean_input_tokens=10,
            mean_output_tokens=50,
            sla_s=4.0,
            max_tokens=200,
        )
    ]
    sched = Scheduler(
        lambda load: 100.0 / (1 + 0.5 * (load - 1)),
        Policy.named("closed-loop", max_concurrency=1),
        tasks=tasks,
    )
    sched.offer(SchedRequest("run", "t", 0.0, 4.0, 50, cap=200), 0.0)
    assert sched.is_running("run")
    waiting = [SchedRequest(f"w{i}", "t", 0.01 * i, 0.01 * i + 4.0, 50, cap=200) for i in range(50)]
    for w in waiting:
        sched.offer(w, w.arrival)
    sched.finish("run", 2.0, 50)  # 50 tokens in 2 s where 0.5 s was predicted
    demoted: dict[str, float] = {}
    admitted: set[str] = set()
    now = 2.0
    while now < 6.0:
        for d in sched.poll(now):
            if d.action is Action.DEMOTE:
                demoted[d.request.id] = now
            elif d.action is Action.ADMIT:
                admitted.add(d.request.id)
        wake = sched.next_wakeup()
        now = min(wake, 6.0) if wake is not None and wake > now else now + 0.01
    assert len(demoted) >= len(waiting) - 2
    for w in waiting:
        if w.id not in admitted:
            assert demoted[w.id] == pytest.approx(max(sched._demotion_time(w), 2.0), abs=0.011)


def running_scheduler(count: int) -> tuple[Scheduler, float]:
    tasks = [
        TaskType(name=n, mean_input_tokens=10, mean_output_tokens=100, sla_s=sla, max_tokens=1000)
        for n, sla in (("a", 60.0), ("b", 120.0))
    ]
    sched = Scheduler(
        lambda load: 2000.0 / (1 + 0.05 * (load - 1)), Policy.named("closed-loop"), tasks=tasks
    )
    for i in range(count):
        at = 0.001 * i
        sched.offer(
            SchedRequest(f"r{i}", "ab"[i % 2], at, at + (60.0, 120.0)[i % 2], 100, cap=1000), at
        )
    assert sched.load == count
    return sched, 0.001 * count


def full_pricing(sched: Scheduler, now: float) -> np.ndarray:
    run = sched._live
    slots = np.flatnonzero(run.live & run.e2e & (run.due - now > 0.0))
    v0, v1 = sched.predicted_speed(sched.load), sched.predicted_speed(sched.load + 1)
    lost = sched._price(now, slots, v0, v1)[0]
    return lost * (sched.load + sched._seen_elsewhere) / sched.load


def test_a_pricing_of_at_most_64_running_is_exact_every_round():
    sched, _ = running_scheduler(PRICED_PER_ROUND)
    now = 59.0  # the first task's answers are due within a second: they can be late
    for k in range(5):
        now += 0.1
        sched.progress(f"r{k}", 40, now)
        exposure = sched._exposure(now, 1)
        assert exposure is not None
        fresh = full_pricing(sched, now)
        assert fresh.max() > 0.0 and np.array_equal(exposure.lost, fresh)


def test_running_requests_that_reach_their_caps_in_time_cost_nothing():
    """Every running request makes its cap before its deadline even at f(L + 1) and the
    speed's slowest node: its chance is the same with one more, and the pricing says
    so without computing it (``RunningSet.beyond_reach``)."""
    sched, now = running_scheduler(PRICED_PER_ROUND)
    run = sched._live
    slots = np.flatnonzero(run.live & run.e2e)
    v0, v1 = sched.predicted_speed(sched.load), sched.predicted_speed(sched.load + 1)
    run.refresh(slots, sched._estimate_of, sched.lengths.version)
    made = np.zeros(slots.size)
    for at, reach in ((now, True), (59.1, False)):  # near the first task's deadlines: no
        budgets = [v0 * (run.due[slots] - at), v1 * (run.due[slots] - at)]
        assert run.beyond_reach(slots, made, budgets, sched._cal.sigma) is reach
    budgets = [v0 * (run.due[slots] - now), v1 * (run.due[slots] - now)]
    chances = run.chances(slots, made, np.stack(budgets), sched._cal.sigma)
    assert np.array_equal(chances[0], chances[1])  # computed in full: exactly no loss
    assert sched._exposure(now, 1) is None  # and the pricing finds it
    sched.progress("r0", 40, 59.1)
    exposure = sched._exposure(59.1, 1)
    assert exposure is not None and exposure.lost.max() > 0.0


def test_a_pricing_of_many_running_catches_up_within_its_rounds():
    """Past 64 running a round prices 64 afresh, the longest since first: after
    running / 64 rounds at one moment every one is as a full pricing gives it, and one
    that reports progress is priced afresh within that many rounds."""
    count = 4 * PRICED_PER_ROUND
    sched, now = running_scheduler(count)
    # Every one never priced: all priced now, each at no cost (far from its deadline).
    assert sched._exposure(now, 1) is None
    assert not np.isnan(sched._live.priced_at[sched._live.live]).any()
    now = 59.0  # the first task's answers are due within a second: they can be late
    for r in range(count):
        sched.progress(f"r{r}", 1, now)
    stale = sched._exposure(now, 1)
    assert stale is not None
    fresh = full_pricing(sched, now)
    assert fresh.max() > 1e-4  # one of 256: each costs a little
    assert not np.allclose(stale.lost, fresh)  # most as priced a minute before
    for _ in range(count // PRICED_PER_ROUND - 1):
        exposure = sched._exposure(now, 1)
    assert exposure is not None
    assert np.array_equal(exposure.lost, fresh)
    # A second request's worth of sequences (not one) is priced afresh in full.
    two = sched._exposure(now, 2)
    assert two is not None and two.lost.size == count and math.isfinite(float(two.lost.sum()))


def test_a_request_found_not_yet_due_is_not_given_again_at_the_same_moment():
    """Its time is its arrival plus its group's offset, which in floating point can land
    a hair before the time it was found due at: put back, it must come after that (else
    a poll goes round it for ever)."""
    arrival, at = next(
        (a, t) for k in range(1, 10_000) if (a := 0.1 * k + 0.07) + ((t := 3.3 * a + 1.1) - a) < t
    )
    r = req("r", arrival)
    times = DueTimes()
    times.push(r, at - 1.0)
    now = math.nextafter(at, -math.inf)  # checked a hair before it is due
    given = 0
    for _ in times.pop_due(now, {"r"}.__contains__):
        given += 1
        if given > 3:
            break
        times.later(r, at)
    assert given == 1
    assert at <= (times.peek({"r"}.__contains__) or 0.0) < at + 1e-9


@pytest.mark.parametrize("seed", range(5))
def test_what_a_pricing_finds_is_read_as_a_sum_over_every_running_request(seed: int):
    # Exposure.cost reads prefix sums over the entries sorted by their time left; it
    # must be the sum it replaced, for any run and any delay, the paces alone included.
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    lost, left = rng.random(n) * 0.05, rng.random(n) * 60.0 + 1e-3
    paced = rng.random(n) < 0.3
    exposure = Exposure(lost, left, paced=paced)
    for runs in (0.0, 0.5, 7.0, 59.0, 1e4, math.inf):
        for delay in (0.0, 3.0, 30.0, 100.0):
            share = np.minimum(runs, np.maximum(left - delay, 0.0)) / left
            assert exposure.cost(runs, delay) == pytest.approx(np.sum(lost * share), abs=1e-12)
            assert exposure.cost(runs, delay, paces=True) == pytest.approx(
                np.sum((lost * share)[paced]), abs=1e-12
            )


@pytest.mark.parametrize("seed", range(3))
def test_every_running_requests_chance_priced_together_is_its_own(seed: int):
    # RunningSet.chances prices every running request in one pass over one table of
    # distributions; each must get what running_chance gives it alone: its own
    # distribution (or its length as certain), what it made, its cap and each budget,
    # and after a distribution moves (a new version) or comes into use, the new one.
    rng = np.random.default_rng(seed)
    ests = {}
    for name, mean in (("a", 40), ("b", 300), ("c", 1200), ("d", 90)):
        ests[name] = LengthEstimate(mean)
        for n in rng.lognormal(math.log(mean), 0.5, 30):
            ests[name].observe(max(int(n), 1))
    run = RunningSet()
    keys: list[str | None] = []

    def start(key: str | None) -> None:
        i, tokens = len(keys), float(rng.integers(1, 2000))
        run.add(
            f"r{i}", deadline=10.0, due=10.0, clock=0.0, tokens=tokens,
            limit=float(rng.choice([tokens, 4096.0])), key=key,
        )  # fmt: skip
        if rng.random() < 0.7:
            run.progress(f"r{i}", int(rng.integers(0, 1500)), 1.0)
        keys.append(key)

    def check(version: int) -> None:
        slots = np.arange(len(keys))
        made = np.nan_to_num(run.made[slots])
        budgets = rng.random((3, slots.size)) * 1500.0
        budgets[1, ::4] = 0.0  # no time left: no chance
        run.refresh(slots, ests.get, version)
        got = run.chances(slots, made, budgets, 0.2)
        for i, key in enumerate(keys):
            one = slice(i, i + 1)
            alone = running_chance(
                ests[key] if key else None, made[one], run.limit[one], budgets[:, one], 0.2,
                np.maximum(run.tokens[one] - made[one], 1.0),
            )  # fmt: skip
            assert got[:, i] == pytest.approx(alone[:, 0], abs=1e-12)

    for _ in range(int(rng.integers(5, 60))):
        start([None, "a", "b", "c"][int(rng.integers(0, 4))])
    start("b")
    check(version=0)
    check(version=0)  # the rows as kept
    for n in rng.lognormal(math.log(2000), 0.3, 200):  # b's answers grow long
        ests["b"].observe(int(n))
    check(version=1)
    start("d")  # a distribution comes into use, the others unchanged
    check(version=1)
