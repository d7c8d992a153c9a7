"""The default policy's decisions: from the chance of finishing in time.

Each test fails if its mechanism is removed: chances from the length distribution
rather than the mean, the marginal cost of one more sequence (to the running
requests and to those still to come), work conservation, refusals only when a
request can no longer be useful, the calibration's floor, requests of several
sequences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from saber.config import TaskType
from saber.scheduler import (
    Action,
    LengthEstimate,
    Outcome,
    Policy,
    SchedRequest,
    Scheduler,
    Tier,
    request_for,
)
from saber.scheduler._chance import Needs, running_chance


def flat(speed: float = 30.0, slope: float = 0.0):
    """f(L) = speed / (1 + slope (L - 1)): flat by default, like a GPU at low load."""
    return lambda load: speed / (1 + slope * (load - 1))


def task(name: str, mean: int, sla: float, cap: int = 1024, useful: float | None = None):
    return TaskType(
        name=name,
        mean_input_tokens=100,
        mean_output_tokens=mean,
        sla_s=sla,
        max_tokens=cap,
        useful_s=useful,
    )


def admitted(decisions) -> list[str]:
    return [d.request.id for d in decisions if d.action is Action.ADMIT]


def default(**overrides) -> Policy:
    return Policy.named("closed-loop", **{"max_concurrency": 256, **overrides})


# -- the chance itself -----------------------------------------------------------------


def test_an_exact_length_needs_its_tokens_and_more_with_a_spread_speed():
    needs = Needs()
    sharp = needs.tokens(("t", 100, None, 0, True, None, 0.0, (0.0, 0.0, 0.0)), None, 0.5, 0.0)
    assert sharp == pytest.approx(100, rel=0.05)
    # With speeds spread around the prediction, being sure takes more than the median.
    sure = needs.tokens(("t", 100, None, 0, True, None, 0.0, (0.0, 0.0, 0.0)), None, 0.9, 0.3)
    assert sure > 1.3 * sharp
    assert needs.tokens(("t", 100, None, 0, True, None, 0.0, (0.0, 0.0, 0.0)), None, 0.1, 0.3) < 80


def test_a_finish_rebuilds_the_distributions_of_its_tasks_spread_kinds_not_its_exact_ones():
    # Every finish teaches its task a new version of its lengths. A kind of an exact
    # length (ignore_eos) is built from its length alone: a queue of them keeps its
    # distributions (a rebuild each per finish was most of a finish's cost), while a
    # kind that follows the task's lengths takes the new ones.
    est = LengthEstimate(100)
    needs = Needs()
    exact = ("t", 300, None, 0, True, None, 0.0, (0.0, 0.0, 0.0))
    spread = ("t", 100, None, 0, False, None, 0.0, (0.0, 0.0, 0.0))
    before = {k[4]: needs.tokens(k, est, 0.9, 0.1) for k in (exact, spread)}
    built = (needs._dist(exact, est, 0.1), needs._dist(spread, est, 0.1))
    for _ in range(200):
        est.observe(900)
    assert needs._dist(exact, est, 0.1) is built[0]
    assert needs.tokens(exact, est, 0.9, 0.1) == before[True]
    assert needs._dist(spread, est, 0.1) is not built[1]
    assert needs.tokens(spread, est, 0.9, 0.1) > 3 * before[False]


def test_the_chance_grows_with_the_budget_and_respects_cap_and_floor():
    est = LengthEstimate(100)
    needs = Needs()
    chances = [
        needs.chance(("t", 100, None, 0, False, None, 0.0, (0.0, 0.0, 0.0)), est, b, 0.1)
        for b in (10, 50, 100, 200, 1000)
    ]
    assert chances == sorted(chances) and chances[0] < 0.05 and chances[-1] > 0.99
    # A cap of 60 makes 60 tokens always enough (within the grid's 4.4%); a floor of
    # 300 makes 200 never enough.
    assert needs.chance(("t", 60, 60, 0, False, None, 0.0, (0.0, 0.0, 0.0)), est, 63, 0.0) > 0.99
    assert (
        needs.chance(("t", 300, None, 300, False, None, 0.0, (0.0, 0.0, 0.0)), est, 200, 0.0) < 0.01
    )


def test_a_running_requests_chance_is_conditioned_on_what_it_has_made():
    # The prior of a task with mean 100 is a lognormal with CV 0.6: check the chance
    # that 50 more tokens suffice after 0 and after 300 against samples of it.
    est = LengthEstimate(100)
    rng = np.random.default_rng(0)
    sigma2 = math.log1p(0.36)
    lengths = rng.lognormal(math.log(100) - sigma2 / 2, math.sqrt(sigma2), 400_000)
    for made in (0.0, 300.0):
        alive = lengths[lengths > made]
        expected = float(np.mean(alive <= made + 50))
        got = running_chance(est, np.array([made]), np.array([1e9]), np.array([50.0]), 0.0)
        assert got[0] == pytest.approx(expected, abs=0.04)
    # At its cap it is done whatever the budget.
    capped = running_chance(est, np.array([300.0]), np.array([310.0]), np.array([50.0]), 0.0)
    assert capped[0] == pytest.approx(1.0)


# -- decisions ---------------------------------------------------------------------------


def test_a_task_whose_mean_answer_is_too_long_for_one_stream_is_still_served():
    # The A10 + 7B case: f(1) = 30 tok/s, QnA answers average 43 tokens within a 1 s
    # SLA. By the mean every one is hopeless; by the distribution a third make it.
    qna = task("code_qna", 43, 1.0, cap=256, useful=60)
    paper_rule = Scheduler(flat(), Policy.named("mean"), tasks=[qna])
    mine = Scheduler(flat(), default(), tasks=[qna])
    for s in (paper_rule, mine):
        r = request_for(qna, id="a", arrival=0.0, max_tokens=256, lengths=s.lengths)
        s.offer(r, 0.0)
    assert mine.is_running("a") and mine.running()[0].tier is Tier.HIGH
    assert not paper_rule.is_running("a")  # demoted on arrival: the mean is hopeless


def test_an_idle_engine_is_never_kept_idle():
    # A request with no chance left of its SLA waits in the LPQ; once nothing runs it
    # is served whatever the predictions (here a calibration that collapsed).
    qna = task("code_qna", 43, 1.0, cap=256, useful=600)
    s = Scheduler(flat(slope=0.5), default(), tasks=[qna])
    s.set_calibration(0.1)  # f(1) looks like 3 tok/s
    busy = SchedRequest("busy", "code_qna", 0.0, 100.0, 40, exact=True)
    s.offer(busy, 0.0)
    late = request_for(qna, id="late", arrival=0.0, max_tokens=256, lengths=s.lengths)
    s.offer(late, 0.0)
    assert s.is_queued("late") or s.running()[-1].id == "late"
    s.finish("busy", 5.0, 40)
    assert s.is_running("late")


def test_demoted_requests_are_served_once_the_engine_idles_issue_21():
    # Issue 21: the calibration fell to a third (the engine seemed slow while busy),
    # 50 demoted requests waited while nothing ran, and expired. Now they are served.
    qna = task("code_qna", 43, 1.0, cap=256, useful=60)
    s = Scheduler(flat(130.0, 0.02), default(queue_cap=50), tasks=[qna])
    s.set_calibration(0.324)
    now, served, rejected = 0.0, 0, 0
    for i in range(50):
        r = request_for(qna, id=f"q{i}", arrival=0.0, max_tokens=256, lengths=s.lengths)
        for d in s.offer(r, 0.0):
            rejected += d.action is Action.REJECT
    running = {r.id for r in s.running()}
    for _ in range(200):  # each runs 0.5 s; bounded
        if not running:
            break
        now += 0.5
        for rid in sorted(running):
            s.finish(rid, now, 40)
            served += 1
        for d in s.poll(now):
            rejected += d.action is Action.REJECT
        running = {r.id for r in s.running()}
    assert served == 50 and rejected == 0 and not s.queued()


def test_a_request_that_can_no_longer_be_useful_is_refused_and_only_then():
    gen = task("gen", 400, 8.0, useful=20.0)
    s = Scheduler(flat(100.0), default(max_concurrency=1), tasks=[gen])
    s.offer(SchedRequest("hog", "other", 0.0, 1e6, 100_000, exact=True), 0.0)
    r = request_for(gen, id="w", arrival=0.0, max_tokens=1024, lengths=s.lengths)
    s.offer(r, 0.0)
    # At 100 tok/s its answer (394 tokens on average) takes about 4 s alone, yet one in
    # fifty is under 110 tokens: it is refused about 1.1 s before 20 s, not sooner.
    assert not [d for d in s.poll(10.0) if d.action is Action.REJECT]
    wake = s.next_wakeup()
    assert wake is not None and 10.0 < wake < 20.0
    out = [d for t in np.arange(10.0, 20.0, 0.25) for d in s.poll(float(t))]
    (refused,) = [d for d in out if d.action is Action.REJECT]
    assert refused.outcome is Outcome.REJECTED_EXPIRED and 17.0 < refused.at <= 19.25


def test_a_running_request_on_the_edge_holds_back_a_newcomer_that_would_push_it_over():
    # "edge" needs 95 tokens within 1 s: it makes it at f(1) = 100, not at f(2) = 90.9.
    s = Scheduler(flat(100.0, 0.1), default(future_weight=0.0), speed_sigma=0.02)
    s.offer(SchedRequest("edge", "t", 0.0, 1.0, 95, exact=True), 0.0)
    long = SchedRequest("long", "t", 0.0, 100.0, 500, exact=True)
    assert admitted(s.offer(long, 0.0)) == []
    # Without the running requests' loss it would have gone in at once.
    s2 = Scheduler(flat(100.0, 0.1), default(future_weight=0.0, gain=False), speed_sigma=0.02)
    s2.offer(SchedRequest("edge", "t", 0.0, 1.0, 95, exact=True), 0.0)
    assert admitted(s2.offer(SchedRequest("long", "t", 0.0, 100.0, 500, exact=True), 0.0))


def short_stream(s: Scheduler, short: TaskType) -> float:
    """Five seconds of twenty ``short`` requests a second, each done 0.2 s after it
    started: returns the time of the last arrival."""
    now = 0.0
    for i in range(100):
        now = i * 0.05
        s.offer(request_for(short, id=f"s{i}", arrival=now, max_tokens=64, lengths=s.lengths), now)
        for r in s.running():
            if r.admitted_at is not None and now - r.admitted_at > 0.2:
                s.finish(r.id, now, 20)
    return now


def test_under_a_stream_of_short_requests_a_long_one_waits_and_short_ones_do_not():
    # Twenty short requests a second keep arriving; each extra sequence slows all of
    # them. A long newcomer would run for a minute among them: it waits; a short one
    # passes.
    short = task("short", 20, 0.25, cap=64)
    long = task("long", 2000, 600.0, cap=4096)
    speed = flat(100.0, 0.02)
    s = Scheduler(speed, default(), tasks=[short, long], speed_sigma=0.05)
    now = short_stream(s, short)
    w = request_for(long, id="long", arrival=now, max_tokens=4096, lengths=s.lengths)
    assert admitted(s.offer(w, now)) == []
    n = request_for(short, id="next", arrival=now, max_tokens=64, lengths=s.lengths)
    assert admitted(s.offer(n, now)) == ["next"]
    # Without the cost to those still to come it goes in at once.
    s2 = Scheduler(speed, default(future_weight=0.0), tasks=[short, long], speed_sigma=0.05)
    w2 = request_for(long, id="long", arrival=0.0, max_tokens=4096, lengths=s2.lengths)
    assert admitted(s2.offer(w2, 0.0)) == ["long"]


@pytest.mark.parametrize(("weight", "runs"), [(1.0, False), (0.5, True), (0.0, True)])
def test_the_future_weight_scales_what_those_still_to_come_lose(weight: float, runs: bool):
    # A 1,000-token answer (10 s alone, due in 12: no time to spare, so holding it back
    # would give it up) among twenty short requests a second: the loss expected of those
    # arriving while it runs holds it back at the full weight; half of it, or none, lets
    # it in.
    short = task("short", 20, 0.25, cap=64)
    long = task("long", 1000, 12.0, cap=4096)
    s = Scheduler(flat(100.0, 0.02), default(future_weight=weight), tasks=[short, long])
    now = short_stream(s, short)
    w = request_for(long, id="long", arrival=now, max_tokens=4096, lengths=s.lengths)
    assert admitted(s.offer(w, now)) == (["long"] if runs else [])


def test_a_future_weight_outside_0_to_1_is_refused():
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="future_weight must be within"):
            default(future_weight=bad)


def test_the_fastest_request_seen_bounds_f1_from_below():
    s = Scheduler(flat(100.0), default())
    s.set_calibration(0.2)
    assert s.max_speed == pytest.approx(20.0)
    s.offer(SchedRequest("r", "t", 0.0, 10.0, 90, exact=True), 0.0)
    s.finish("r", 1.0, 90)  # 90 tok/s, at a calibration that predicted 20
    assert s.max_speed >= 90.0


def test_a_request_of_several_sequences_counts_each_of_them():
    s = Scheduler(flat(100.0, 0.01), default(max_concurrency=8))
    s.offer(SchedRequest("four", "t", 0.0, 100.0, 10, exact=True, seqs=4), 0.0)
    assert s.load == 4
    s.offer(SchedRequest("five", "t", 0.0, 100.0, 10, exact=True, seqs=5), 0.0)
    assert s.load == 4 and s.is_queued("five")  # 9 > 8: it waits for room
    s.finish("four", 0.5, 40)
    s.poll(0.5)
    assert s.load == 5 and s.is_running("five")
    with pytest.raises(ValueError, match="max_concurrency"):
        s.offer(SchedRequest("nine", "t", 0.0, 100.0, 10, seqs=9), 0.0)
    # Each sequence teaches the learned lengths its own share.
    assert s.observations[-1].speed == pytest.approx(10 / 0.5)


def test_the_chance_policy_reports_its_spread():
    s = Scheduler(flat(100.0), default(), speed_sigma=0.3)
    assert s.speed_sigma == pytest.approx(0.3)
    assert math.isfinite(s.speed_sigma)


def test_a_request_held_for_those_still_to_come_passes_once_arrivals_fall_quiet():
    # As above, a long request waits while short ones keep arriving. Then none comes:
    # next_wakeup names the moment the last arrival leaves the rate's window, and the
    # poll then admits it (seen on vLLM: held a minute beside one other request while
    # nothing else came, since nothing woke the scheduler).
    short = task("short", 20, 0.25, cap=64)
    long = task("long", 2000, 600.0, cap=4096)
    s = Scheduler(flat(100.0, 0.02), default(), tasks=[short, long], speed_sigma=0.05)
    now = last = short_stream(s, short)
    w = request_for(long, id="long", arrival=now, max_tokens=4096, lengths=s.lengths)
    assert admitted(s.offer(w, now)) == []
    for r in s.running():  # the short ones end; one long-running request stays
        if r.id != s.running()[-1].id:
            s.finish(r.id, now + 0.3, 20)
    assert s.load >= 1 and s.is_queued("long")
    wake = s.next_wakeup()
    assert wake is not None and last < wake <= last + 10.0 + 1e-9
    assert admitted(s.poll(wake)) == ["long"]
    assert s.next_wakeup() is None  # nothing waits: no timer


def test_a_request_that_no_check_passed_passes_once_its_task_is_learned_shorter():
    # A full engine (f(10) = 18 tok/s) and a request of 300 expected tokens due in 4 s:
    # it could finish at f(1), so it waits in the HPQ, but not at f(10), so rounds that
    # change nothing skip its check. The learned lengths change nothing else (a pool's
    # other backends teach them too): once they say the task is short, it goes in.
    gen = task("gen", 300, 4.0)
    s = Scheduler(flat(100.0, 0.5), default(future_weight=0.0), tasks=[gen])
    for i in range(9):
        s.offer(SchedRequest(f"run{i}", "t", 0.0, 1e6, 10, exact=True), 0.0)
    w = request_for(gen, id="w", arrival=0.0, max_tokens=1024, lengths=s.lengths)
    assert admitted(s.offer(w, 0.0)) == [] and s.load == 9
    assert admitted(s.poll(0.1)) == [] and admitted(s.poll(0.2)) == []
    assert s.is_queued("w") and w.tier is Tier.HIGH  # not demoted
    for _ in range(300):
        s.lengths.observe("gen", 10)
    assert admitted(s.poll(0.2)) == ["w"]
