"""Beyond the paper: each closed-loop knob of Policy, and the default preset.

Each test fails if its mechanism is removed: deadline order, the idle-only LPQ,
calibration from finished requests, learned lengths, live progress, observations.
"""

from __future__ import annotations

import pytest

from saber.config import TaskType
from saber.scheduler import (
    PRESETS,
    Action,
    Outcome,
    Policy,
    SchedRequest,
    Scheduler,
    Tier,
    request_for,
)


def usl(lam: float = 100.0, sigma: float = 0.1):
    return lambda load: lam / (1 + sigma * (load - 1))


def req(rid: str, tokens: int, sla: float, arrival: float = 0.0, task: str = "t") -> SchedRequest:
    return SchedRequest(id=rid, task=task, arrival=arrival, deadline=arrival + sla, tokens=tokens)


def task(name: str = "t", mean: int = 50, sla: float = 1.0) -> TaskType:
    return TaskType(
        name=name, mean_input_tokens=10, mean_output_tokens=mean, sla_s=sla, max_tokens=2000
    )


def admitted(decisions) -> list[str]:
    return [d.request.id for d in decisions if d.action is Action.ADMIT]


def test_the_presets_are_the_paper_and_the_closed_loop_default():
    assert PRESETS["paper"] == Policy()
    closed = Policy.named("closed-loop")
    assert (closed.order, closed.protection, closed.decide) == ("deadline", "none", "chance")
    assert closed.calibrate and closed.learn_lengths and closed.gain and closed.future_weight == 1.0
    mean = Policy.named("mean")
    assert (mean.order, mean.protection, mean.lpq, mean.decide) == (
        "deadline",
        "none",
        "idle",
        "mean",
    )
    assert Policy.named("closed-loop", window_size=3).window_size == 3
    with pytest.raises(ValueError, match="unknown policy"):
        Policy.named("fastest")


def test_from_config_starts_from_the_named_preset_and_applies_what_is_set():
    class Cfg:
        policy = "paper"
        window_size = 16
        protection = None  # not set: the preset's
        max_concurrency = 4

    p = Policy.from_config(Cfg())
    assert (p.window_size, p.protection, p.max_concurrency, p.order) == (16, "frozen", 4, "random")


def test_deadline_order_admits_the_most_urgent_feasible_request_first():
    # Capacity for one more: f(2) = 90.9. Both candidates are feasible; "b" arrived
    # later but its deadline is sooner.
    s = Scheduler(usl(), Policy(order="deadline", window_size=8, max_concurrency=2))
    s.offer(req("run", 1, 100.0), 0.0)
    s.offer(req("blocker", 1, 100.0), 0.0)  # fills the cap
    s.offer(req("a", 10, 5.0, arrival=0.0), 0.0)
    s.offer(req("b", 10, 1.0, arrival=0.1), 0.1)
    s.finish("blocker", 0.2)
    assert admitted(s.poll(0.2)) == ["b"]


def test_the_idle_lpq_waits_while_any_hpq_request_runs():
    for lpq, expect in (("paper", ["late"]), ("idle", [])):
        s = Scheduler(usl(), Policy(lpq=lpq), tasks=[task()])
        s.offer(req("hpq", 10, 10.0), 0.0)
        assert admitted(s.offer(req("late", 500, 1.0), 0.0)) == expect, lpq
    s.finish("hpq", 0.5)
    assert admitted(s.poll(0.5)) == ["late"]


def test_the_idle_lpq_leaves_room_for_a_new_arrival():
    # A fresh request of task t needs 50/1 = 50 tok/s. With sigma 0.1, f(11) = 50: ten
    # demoted requests may run, so that an eleventh arrival still gets its 50 tok/s.
    s = Scheduler(usl(), Policy(lpq="idle"), tasks=[task(mean=50)])
    for i in range(20):
        s.offer(req(f"late{i}", 500, 1.0), 0.0)
    assert s.load == 10 and s.queued(tier=Tier.LOW) == 10


def test_calibration_follows_an_engine_slower_than_its_profile():
    s = Scheduler(usl(sigma=0.0), Policy(calibrate=True))
    t = 0.0
    for i in range(60):  # alone, each 100-token request takes 2 s: half the predicted 100 tok/s
        s.offer(req(f"r{i}", 100, 10.0, arrival=t), t)
        t += 2.0
        s.finish(f"r{i}", t, 100)
    assert s.calibration == pytest.approx(0.5, rel=0.02)
    assert s.max_speed == pytest.approx(50, rel=0.02)
    # Demotion now uses the calibrated f(1): 300 tokens in 5 s cannot be made at 50 tok/s.
    s.offer(req("blocker", 1, 100.0, arrival=t), t)
    decisions = s.offer(req("big", 300, 5.0, arrival=t), t)
    assert any(d.action is Action.DEMOTE and d.request.id == "big" for d in decisions)


def test_answers_of_one_token_teach_the_speed_model_nothing():
    """A one-token answer's time is its prompt's prefill: forty of them (a client that
    only counts a prompt's tokens) must not make the engine look slow, nor feed the refit."""
    s = Scheduler(usl(sigma=0.0), Policy(calibrate=True))
    t = 0.0
    for i in range(40):  # 1 token in 0.2 s: 5 tok/s where f(1) is 100
        s.offer(req(f"r{i}", 1, 10.0, arrival=t), t)
        t += 0.2
        s.finish(f"r{i}", t, 1)
    assert s.calibration == 1.0 and s.max_speed == 100
    assert not s.observations
    s.offer(req("long", 100, 10.0, arrival=t), t)
    s.finish("long", t + 2.0, 100)  # an answer of 100 tokens at 50 tok/s does teach it
    assert s.calibration < 1.0 and len(s.observations) == 1


def test_without_calibration_the_profile_is_trusted():
    s = Scheduler(usl(sigma=0.0), Policy())
    for i in range(10):
        s.offer(req(f"r{i}", 100, 10.0, arrival=2.0 * i), 2.0 * i)
        s.finish(f"r{i}", 2.0 * i + 2.0, 100)
    assert s.calibration == 1.0 and s.max_speed == 100


def test_a_swapped_speed_model_starts_its_calibration_afresh():
    s = Scheduler(usl(sigma=0.0), Policy(calibrate=True))
    s.offer(req("a", 100, 10.0), 0.0)
    s.finish("a", 2.0, 100)
    assert s.calibration < 1.0
    s.set_speed_model(usl(lam=50.0, sigma=0.0))
    assert s.calibration == 1.0 and s.max_speed == 50


def test_finished_requests_are_observations_with_their_time_averaged_load():
    s = Scheduler(usl(sigma=0.0), Policy())
    s.offer(req("a", 100, 10.0), 0.0)
    s.offer(req("b", 100, 10.0), 0.0)
    s.finish("b", 1.0, 50)  # two ran for 1 s
    s.finish("a", 3.0, 200)  # then one for 2 s: mean load 4/3
    a = s.observations[-1]
    assert a.load == pytest.approx(4 / 3) and a.speed == pytest.approx(200 / 3)
    assert a.predicted == pytest.approx(100)


def test_learned_lengths_set_what_new_requests_are_expected_to_generate():
    t = task(mean=50)
    s = Scheduler(usl(), Policy(learn_lengths=True), tasks=[t])
    assert request_for(t, lengths=s.lengths, id="x", arrival=0.0).tokens == pytest.approx(
        50, rel=0.05
    )
    for i in range(1000):
        s.offer(req(f"r{i}", 50, 100.0, arrival=float(i)), float(i))
        s.finish(f"r{i}", float(i) + 0.5, 300)
    assert request_for(t, lengths=s.lengths, id="y", arrival=0.0).tokens == pytest.approx(
        300, rel=0.1
    )
    assert request_for(t, lengths=s.lengths, id="z", arrival=0.0, max_tokens=100).tokens <= 100
    paper = Scheduler(usl(), Policy(), tasks=[t])
    paper.offer(req("r", 50, 100.0), 0.0)
    paper.finish("r", 0.5, 300)
    assert request_for(t, lengths=paper.lengths, id="w", arrival=0.0).tokens == 50


def test_live_progress_sets_what_a_newcomer_costs_a_running_request():
    # "long" must make exactly 95 tokens within 1 s: it can at f(1) = 100 and cannot at
    # f(2) = 90.9, so admitting anyone would cost it its SLA. Once it has streamed 90
    # by t = 0.5, 5 tokens in 0.5 s are safe at either speed, and "next" is admitted.
    s = Scheduler(usl(), Policy.named("closed-loop", max_concurrency=3), speed_sigma=0.02)
    s.offer(SchedRequest("long", "t", 0.0, 1.0, 95, exact=True), 0.0)
    assert s.is_running("long")
    assert admitted(s.offer(SchedRequest("next", "t", 0.1, 100.0, 200, exact=True), 0.1)) == []
    s.progress("long", 90, 0.5)
    assert admitted(s.poll(0.5)) == ["next"]
    s.progress("long", 10, 0.6)  # a count that goes back is ignored
    assert next(r for r in s.running() if r.id == "long").generated == 90


def test_a_poll_with_nothing_changed_does_not_price_the_running_requests_again():
    # As above, "next" is kept out at t = 0.1 by what it would cost "long". Polls that
    # follow with nothing reported, arriving or finishing take the same answer without
    # pricing "long" again, until a 32nd of next's slack (3.1 s) has passed; by then
    # long's deadline (1 s) is behind it, it has nothing left to lose, and next goes in.
    s = Scheduler(usl(), Policy.named("closed-loop", max_concurrency=3), speed_sigma=0.02)
    priced: list[float] = []
    exposure = s._exposure
    s._exposure = lambda now, extra: priced.append(now) or exposure(now, extra)  # type: ignore[method-assign]
    s.offer(SchedRequest("long", "t", 0.0, 1.0, 95, exact=True), 0.0)
    assert admitted(s.offer(SchedRequest("next", "t", 0.1, 100.0, 200, exact=True), 0.1)) == []
    assert priced == [0.1]
    assert [admitted(s.poll(t)) for t in (0.2, 1.5, 3.0)] == [[], [], []]
    assert priced == [0.1]
    assert admitted(s.poll(3.3)) == ["next"]
    assert priced == [0.1, 3.3]


def test_finish_learns_from_the_streamed_count_when_not_told_the_total():
    t = task(mean=50)
    s = Scheduler(usl(), Policy(learn_lengths=True), tasks=[t])
    for i in range(500):
        s.offer(req(f"r{i}", 50, 100.0, arrival=float(i)), float(i))
        s.progress(f"r{i}", 400, float(i) + 0.4)
        assert s.finish(f"r{i}", float(i) + 0.5) is Outcome.SERVED
    assert s.lengths.summary()["t"]["observed"] == 500
    assert request_for(t, lengths=s.lengths, id="x", arrival=0.0).tokens > 300


def ttft_task(useful: float | None = None) -> TaskType:
    return TaskType(
        name="complete",
        mean_input_tokens=500,
        mean_output_tokens=40,
        sla_s=0.5,
        sla_kind="ttft",
        max_tokens=64,
        useful_s=useful,
    )


def test_a_ttft_sla_is_met_by_the_first_token_whatever_the_speed():
    # At L + 1 = 2 the engine gives 90.9 tok/s: 40 tokens in 0.5 s need 80, fine either
    # way; at L + 1 = 11, 50 tok/s: an e2e request waits, a TTFT one goes in, since its
    # first token comes after ttft(500, 11) = 0.1 s.
    t = ttft_task()
    s = Scheduler(usl(), Policy.named("closed-loop"), tasks=[t], ttft=lambda p, load: 0.1)
    for i in range(10):
        s.offer(req(f"run{i}", 1, 100.0), 0.0)
    assert s.load == 10
    e2e = req("e2e", 40, 0.5, task="other")
    assert admitted(s.offer(e2e, 0.0)) == []
    first = request_for(t, lengths=s.lengths, id="c", arrival=0.0)
    assert first.sla_kind == "ttft" and first.required_speed_at(0.0) == 0.0
    assert admitted(s.offer(first, 0.0)) == ["c"]


def test_a_ttft_request_is_demoted_when_even_a_lone_first_token_would_be_late():
    t = ttft_task()
    s = Scheduler(usl(), Policy.named("closed-loop"), tasks=[t], ttft=lambda p, load: 0.2 * load)
    s.offer(req("run1", 1, 100.0), 0.0)
    s.offer(req("run2", 1, 100.0), 0.0)
    r = request_for(t, lengths=s.lengths, id="late", arrival=0.0)  # needs its first token by 0.5
    assert admitted(s.offer(r, 0.0)) == []  # at L + 1 = 3 it would come at 0.6
    assert s.poll(0.29) == []
    decisions = s.poll(0.31)  # alone it would take 0.2: hopeless from 0.3 on
    assert any(d.action is Action.DEMOTE and d.request.id == "late" for d in decisions)


def test_a_ttft_request_with_useful_s_must_still_finish_in_time():
    # Useful for 1 s: 40 tokens in (1 - 0) s need 40 tok/s. f(L + 1) = 33 at L = 20: the
    # first token would be quick, but the answer would not be ready while still wanted.
    t = ttft_task(useful=1.0)
    s = Scheduler(usl(), Policy.named("closed-loop"), tasks=[t], ttft=lambda p, load: 0.05)
    for i in range(20):
        s.offer(req(f"run{i}", 1, 100.0), 0.0)
    assert admitted(s.offer(request_for(t, lengths=s.lengths, id="c", arrival=0.0), 0.0)) == []
    for i in range(15):
        s.finish(f"run{i}", 0.01)
    assert "c" in admitted(s.poll(0.01))


def test_a_faster_engine_found_by_calibration_defers_a_demotion_already_scheduled():
    # f(1) = 100, f(4) = 14.3 (sigma 2). "wait" needs 80 tok/s: hopeless from 0.2 s at
    # f(1) = 100. Then a request finishes having made ten times what f(4) predicted:
    # the calibration goes to ~1.9, f(1) to ~188, and the demotion to ~0.57 s.
    s = Scheduler(usl(sigma=2.0), Policy(calibrate=True, max_concurrency=4))
    for i in range(4):
        s.offer(req(f"run{i}", 1, 100.0), 0.0)
    s.offer(req("wait", 80, 1.0), 0.0)
    assert s.next_wakeup() == pytest.approx(0.2)
    s.finish("run0", 0.1, 14)
    assert s.calibration == pytest.approx(1.88, abs=0.02)
    assert not s.is_running("wait")  # f(4) x 1.88 = 27 tok/s is still too slow for it
    assert s.poll(0.3) == [] and s.queued(tier=Tier.HIGH) == 1  # not demoted at 0.2
    due = 1.0 - 80 / s.max_speed
    assert s.next_wakeup() == pytest.approx(due)
    d = s.poll(due + 1e-6)[0]  # then the paper's LPQ serves it at once: a slot is free
    assert d.action is Action.DEMOTE and d.request.id == "wait"
