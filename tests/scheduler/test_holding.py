"""How long arrivals are taken to go on, and when a request that passes is worth more
admitted a little later (docs/admission.md, "The hold as a delay")."""

from __future__ import annotations

import math

import pytest
from test_chance import admitted, default, flat, short_stream, task

from saber.scheduler import SchedRequest, Scheduler, request_for
from saber.scheduler._arrivals import WINDOW_S, Arrivals
from saber.scheduler._costs import overlap


def arrive(arrivals: Arrivals, at: float, i: int) -> None:
    arrivals.observe(SchedRequest(f"r{i}", "t", at, at + 1.0, 10), at)


def test_a_burst_is_measured_from_its_first_arrival_and_a_stream_keeps_its_age():
    a = Arrivals()
    for i in range(5):  # five arrivals in 0.4 s: 12.5 a second, not 5 over a floor of 1 s
        arrive(a, 100.0 + 0.1 * i, i)
    assert a.rate(100.4) == pytest.approx(5 / 0.4)
    assert a.age(100.4) == pytest.approx(0.4)
    for i in range(5, 305):  # then one every 0.1 s for 30 s: the run is 30 s old
        arrive(a, 100.0 + 0.1 * i, i)
    assert a.age(130.4) == pytest.approx(30.4)
    assert a.rate(130.4) == pytest.approx(10.0, rel=0.02)  # over the window
    # A pause longer than the window ends the run: the next arrival starts a new one.
    arrive(a, 130.4 + WINDOW_S + 1.0, 999)
    assert a.age(130.4 + WINDOW_S + 1.0) < 0.1


@pytest.mark.parametrize(("runs", "d"), [(10.0, 3.0), (3.0, 10.0)])
def test_the_overlap_with_arrivals_that_persist_is_the_certain_one_at_the_limit(
    runs: float, d: float
):
    certain = runs - d / 2 if d <= runs else runs * runs / (2 * d)
    assert overlap(1e5, runs, d) == pytest.approx(certain, rel=1e-3)
    # A younger run of arrivals is likelier to end while it runs; a later start too.
    young, old = overlap(1.0, runs, d), overlap(30.0, runs, d)
    assert 0 < young < old < certain
    assert overlap(30.0, runs, d, delay=5.0) < old
    assert math.isclose(overlap(30.0, runs, d, delay=0.0), old)


def test_arrivals_are_taken_to_go_on_for_as_long_again_as_they_have_lasted():
    # Seen from a newcomer that outlasts them all, arrivals 2 s old bring about 2 s
    # more of them (not a heavy tail: a short burst is most likely over soon).
    assert overlap(2.0, 1e4, 1e-6) == pytest.approx(2.0, rel=1e-3)
    assert overlap(2.0, 1e4, 1e-6, delay=2.0) == pytest.approx(2.0 / math.e, rel=1e-3)


@pytest.mark.parametrize(("sla", "waits"), [(600.0, True), (12.0, False)])
def test_a_long_answer_waits_out_a_burst_of_short_ones_only_with_time_to_spare(
    sla: float, waits: bool
):
    # A 1,000-token answer (10 s alone) arrives at the end of a 5 s burst of short
    # requests; its chance clears what it costs now (future_weight 0.5). Due in 10
    # minutes, it keeps that chance if it starts once the short ones running have ended
    # and the burst, likely, with them: it waits, and goes in as soon as they have. Due
    # in 12 s, waiting would cost it its deadline: it goes in at once.
    short = task("short", 20, 0.25, cap=64)
    long = task("long", 1000, sla, cap=4096)
    s = Scheduler(flat(100.0, 0.02), default(future_weight=0.5), tasks=[short, long])
    now = short_stream(s, short)
    w = request_for(long, id="long", arrival=now, max_tokens=4096, lengths=s.lengths)
    if not waits:
        assert admitted(s.offer(w, now)) == ["long"]
        return
    assert admitted(s.offer(w, now)) == []
    assert s.is_queued("long")
    later = now + 0.25
    for r in s.running():
        s.finish(r.id, later, 20)
    assert admitted(s.poll(later)) == ["long"]
