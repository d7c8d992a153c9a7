"""What one more sequence costs in a pool: the pool's arrivals, each backend in its share
of the pool's starts, and a hold that moving the request elsewhere would not undo."""

from __future__ import annotations

import pytest
from test_chance import admitted, default, flat, task

from saber.scheduler import Action, Placed, Pool, Scheduler, request_for
from saber.scheduler._arrivals import WINDOW_S, Shares


def admissions(placed: list[Placed]) -> dict[str, int]:
    return {p.decision.request.id: p.backend for p in placed if p.decision.action is Action.ADMIT}


def test_shares_are_the_recent_starts_in_sequences_and_even_when_nothing_started():
    s = Shares(3)
    assert s.shares() == pytest.approx([1 / 3] * 3)
    s.observe(0, 1, 0.0)
    s.observe(0, 2, 1.0)
    s.observe(2, 1, 2.0)
    assert s.shares() == pytest.approx([0.75, 0.0, 0.25])
    s.expire(1.0 + WINDOW_S)  # the first two have left the window
    assert s.shares() == pytest.approx([0.0, 0.0, 1.0])
    s.expire(2.0 + WINDOW_S)
    assert s.shares() == pytest.approx([1 / 3] * 3)


def stream(p: Pool, short, count: int = 100) -> float:
    """Twenty ``short`` requests a second for ``count`` / 20 s, each done 0.2 s after
    it started, wherever it runs: returns the time of the last arrival."""
    now, started = 0.0, {}
    for i in range(count):
        now = i * 0.05
        r = request_for(short, id=f"s{i}", arrival=now, max_tokens=64, lengths=p.lengths)
        started.update((rid, now) for rid in admissions(p.offer(r, now)))
        for rid, at in list(started.items()):
            if now - at > 0.2:
                p.finish(rid, now, 20)
                del started[rid]
    return now


def test_a_backend_prices_the_pools_arrivals_in_its_share_of_the_pools_starts():
    # The stream arrives for the pool while backend 1 is out of service: every short
    # request starts on backend 0, which then prices a long request exactly as one
    # engine serving the whole stream does; backend 1, back in service, has started
    # none of them and prices none of those still to come (its chance alone, nothing
    # running there).
    short = task("short", 20, 0.25, cap=64)
    long = task("long", 1000, 600.0, cap=4096)
    speeds = [flat(100.0, 0.02)] * 2
    p = Pool.build(speeds, default(), tasks=[short, long])
    one = Pool.build(speeds[:1], default(), tasks=[short, long])
    p.set_down(1, True)
    now = stream(p, short)
    assert stream(one, short) == now
    p.set_down(1, False)

    def value(pool: Pool, i: int) -> float:
        w = request_for(long, id="long", arrival=now, max_tokens=4096, lengths=pool.lengths)
        return pool.backends[i].placement_value(w, now)

    p.poll(now)
    assert value(p, 0) == pytest.approx(value(one, 0))
    assert value(one, 0) < 0.9
    assert value(p, 1) == pytest.approx(1.0)


def test_a_request_held_for_later_is_not_moved_to_a_backend_that_would_hold_it_too():
    # A long answer with ten minutes to spare arrives during a burst of short ones that
    # run on both backends: each would rather start it once the burst has passed, so it
    # waits (where it was placed) instead of going in at once on the other backend.
    short = task("short", 20, 0.25, cap=64)
    long = task("long", 1000, 600.0, cap=4096)
    p = Pool.build([flat(100.0, 0.02)] * 2, default(future_weight=0.5), tasks=[short, long])
    now = stream(p, short)
    w = request_for(long, id="long", arrival=now, max_tokens=4096, lengths=p.lengths)
    assert admissions(p.offer(w, now)) == {}
    assert p.is_queued("long")
    later = now + 0.25
    for backend in p.backends:
        for r in backend.running():
            p.finish(r.id, later, 20)
    assert admitted(d.decision for d in p.poll(later)) == ["long"]


def test_behind_several_gateways_the_others_running_requests_are_priced_like_ones_own():
    # Some requests run here from this gateway and six from others (as last scraped):
    # one more sequence slows them all. The others' deadlines are unknown here, so each
    # of this gateway's stands for (own + 6) / own of them; a headroom for what the
    # others may have added since slows the predictions alike but is not counted as
    # running.
    t = task("t", 200, 3.0)

    def loss(seen: int, headroom: int) -> tuple[float, int]:
        s = Scheduler(flat(100.0, 0.05), default(), tasks=[t])
        for i in range(4):
            s.offer(request_for(t, id=f"r{i}", arrival=0.0, max_tokens=400), 0.0)
        s.set_elsewhere(seen, headroom, 0.0)
        return s._loss(1.0, 1), s.load

    unseen, own = loss(0, 6)
    assert unseen > 0 and own > 0
    assert loss(6, 0) == (pytest.approx(unseen * (own + 6) / own), own)
