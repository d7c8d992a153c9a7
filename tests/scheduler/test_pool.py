"""A pool of backends, each its own scheduler: placement by the chance of meeting the
deadline, waiting requests moved to any backend that would admit them, every request
placed and released exactly once."""

from __future__ import annotations

import math
import random

import pytest

from saber.config import TaskType
from saber.scheduler import Action, Placed, Policy, Pool, Scheduler, TaskLengths, request_for


def flat(speed: float, slope: float = 0.0):
    return lambda load: speed / (1 + slope * (load - 1))


TASK = TaskType(name="t", mean_input_tokens=50, mean_output_tokens=100, sla_s=10.0, max_tokens=400)


def default(**overrides) -> Policy:
    return Policy.named("closed-loop", **overrides)


def pool(*speeds, place="chance", **policy) -> Pool:
    return Pool.build(list(speeds), default(**policy), tasks=[TASK], place=place)


def req(rid: str, now: float, tokens: int | None = None):
    return request_for(TASK, id=rid, arrival=now, tokens=tokens)


def admissions(placed: list[Placed]) -> dict[str, int]:
    return {p.decision.request.id: p.backend for p in placed if p.decision.action is Action.ADMIT}


def test_a_request_goes_where_its_chance_is_highest():
    # 300 tokens in 10 s: the 20 tok/s backend cannot make it, the 60 tok/s one can.
    p = pool(flat(20.0), flat(60.0))
    assert admissions(p.offer(req("a", 0.0, tokens=300), 0.0)) == {"a": 1}
    # Equal chances (both certain) go to the backend that runs it fastest: the one
    # not yet loaded, on engines that slow down with load.
    q = pool(flat(60.0, slope=0.2), flat(60.0, slope=0.2))
    first = admissions(q.offer(req("a", 0.0, tokens=50), 0.0))
    second = admissions(q.offer(req("b", 0.0, tokens=50), 0.0))
    assert {first["a"], second["b"]} == {0, 1}


def test_twin_backends_share_the_load_whatever_luck_one_had():
    """A request that ran fast on one twin (a short answer, the engine idle) floors its
    f(1) and raises its calibration; it must not tip placement: at equal chances the
    less loaded twin still wins, so the two stay within two requests of each other (the
    lucky twin's higher calibration makes what one more costs there a little smaller,
    now that a certain length's chance is the speed's smooth one, not three steps)."""
    p = pool(flat(60.0, slope=0.2), flat(60.0, slope=0.2))
    assert admissions(p.offer(req("lucky", 0.0, tokens=50), 0.0)) == {"lucky": 0}
    p.finish("lucky", 0.2, tokens=50)  # 250 tok/s, four times f(1)
    on = [admissions(p.offer(req(f"r{i}", 1.0, tokens=20), 1.0))[f"r{i}"] for i in range(12)]
    assert abs(on.count(0) - on.count(1)) <= 2, on


def test_a_backend_slow_to_first_tokens_is_valued_for_the_wait():
    """f(L) is a decode speed: a backend whose last request waited 4 s for its first
    token (long prompts ahead of it) leaves a request placed there 4 s less to decode."""
    p = pool(flat(30.0, slope=0.2), flat(30.0, slope=0.2))
    on = admissions(p.offer(req("a", 0.0, 50), 0.0)) | admissions(p.offer(req("b", 0.0, 50), 0.0))
    assert sorted(on.values()) == [0, 1]
    slow = on["a"]
    p.progress("a", 1, 4.0)  # its first token after 4 s
    p.progress("b", 1, 0.2)
    # 200 tokens by 14 s at 25 tok/s (two running): 8 s of decoding, so a start at 4 s
    # makes it and one after a 4 s wait does not.
    values = [b.placement_value(req("probe", 4.0, 200), 4.0) for b in p.backends]
    assert values[slow] < 0.5 < values[1 - slow]
    assert admissions(p.offer(req("c", 4.0, 200), 4.0)) == {"c": 1 - slow}
    # Idle again, a backend has no wait to show: 200 tokens in 10 s alone (30 tok/s)
    # would not make it after a 4 s wait.
    p.finish("a", 5.0, 50)
    assert p.backends[slow].placement_value(req("probe", 5.0, 200), 5.0) > 0.5


def test_the_engines_own_wait_for_first_tokens_counts_as_a_streams_would():
    """A backend serving non-streamed requests (or another gateway's) shows no first
    tokens to this scheduler; its engine's mean time to first token, read from its
    /metrics, is the wait instead, and the latest of the two counts."""
    p = pool(flat(30.0, slope=0.2), flat(30.0, slope=0.2))
    on = admissions(p.offer(req("a", 0.0, 50), 0.0)) | admissions(p.offer(req("b", 0.0, 50), 0.0))
    assert sorted(on.values()) == [0, 1]
    slow = on["a"]
    p.set_first_token_wait(slow, 4.0)  # no stream reported a token
    values = [b.placement_value(req("probe", 4.0, 200), 4.0) for b in p.backends]
    assert values[slow] < 0.5 < values[1 - slow]
    assert admissions(p.offer(req("c", 4.0, 200), 4.0)) == {"c": 1 - slow}
    p.set_first_token_wait(slow, 0.1)  # a newer read: first tokens come at once again
    assert p.backends[slow].first_token_wait == 0.1
    p.progress("a", 1, 4.5)  # and a stream's own first token after 4.5 s, newer still
    assert p.backends[slow].first_token_wait == 4.5
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="wait for a first token"):
            p.set_first_token_wait(slow, bad)
    assert p.backends[slow].first_token_wait == 4.5


def test_a_waiting_request_runs_on_whichever_backend_frees_first():
    p = pool(flat(60.0), flat(60.0), max_concurrency=1)
    assert admissions(p.offer(req("a", 0.0, 50), 0.0)) == {"a": 0}
    assert admissions(p.offer(req("b", 0.0, 50), 0.0)) == {"b": 1}
    assert admissions(p.offer(req("c", 0.0, 50), 0.0)) == {}
    home = p.backend_of("c")
    other = 1 - home
    p.finish("ab"[other], 1.0, 50)
    # Its own backend is still full; the other one has room, and takes it.
    assert admissions(p.poll(1.0)) == {"c": other}
    assert p.backend_of("c") == other
    assert p.backends[home].queued() == 0 and p.backends[other].load == 1
    assert p.finish("c", 2.0, 50) is not None and p.backends[other].load == 0


def test_the_baselines_place_once_and_never_move_a_request():
    p = pool(flat(60.0), flat(60.0), place="round-robin", max_concurrency=1)
    got = {}
    for rid in "abc":
        got |= admissions(p.offer(req(rid, 0.0, 50), 0.0))
    assert got == {"a": 0, "b": 1} and p.backend_of("c") == 0
    p.finish("b", 1.0, 50)
    assert admissions(p.poll(1.0)) == {}  # backend 1 is free, but c waits on 0
    p.finish("a", 2.0, 50)
    assert admissions(p.poll(2.0)) == {"c": 0}
    q = pool(flat(60.0), flat(60.0), place="least-loaded", max_concurrency=1)
    assert admissions(q.offer(req("a", 0.0, 50), 0.0)) == {"a": 0}
    assert admissions(q.offer(req("b", 0.0, 50), 0.0)) == {"b": 1}


def test_a_pool_of_one_decides_as_its_scheduler_does():
    rng = random.Random(3)
    policy = default(max_concurrency=8)
    alone = Scheduler(flat(40.0, 0.05), policy, tasks=[TASK])
    one = Pool.build([flat(40.0, 0.05)], policy, tasks=[TASK])
    now, running, seen = 0.0, [], ([], [])
    for i in range(300):
        now += rng.expovariate(4.0)
        if running and rng.random() < 0.6:
            rid = running.pop(rng.randrange(len(running)))
            alone.finish(rid, now, 80)
            one.finish(rid, now, 80)
        tokens = rng.randint(10, 300)
        a = alone.offer(req(f"r{i}", now, tokens), now)
        b = one.offer(req(f"r{i}", now, tokens), now)
        seen[0].extend((d.action, d.request.id) for d in a)
        seen[1].extend((p.decision.action, p.decision.request.id) for p in b)
        running += [d.request.id for d in a if d.action is Action.ADMIT]
    assert len(seen[0]) > 200
    assert seen[0] == seen[1]


def test_every_request_is_placed_once_and_every_slot_released():
    rng = random.Random(7)
    p = pool(flat(50.0, 0.1), flat(20.0, 0.05), flat(80.0, 0.2), max_concurrency=4)
    now, running, ended = 0.0, {}, set()
    admitted: dict[str, int] = {}

    def apply(placed: list[Placed]) -> None:
        for x in placed:
            rid = x.decision.request.id
            if x.decision.action is Action.ADMIT:
                assert rid not in admitted, f"{rid} admitted twice"
                admitted[rid] = x.backend
                running[rid] = x.backend
            elif x.decision.action is Action.REJECT:
                assert rid not in admitted and rid not in ended
                ended.add(rid)

    for i in range(400):
        now += rng.expovariate(6.0)
        apply(p.offer(req(f"r{i}", now, rng.randint(5, 400)), now))
        for rid in [r for r in running if rng.random() < 0.2]:
            backend = running.pop(rid)
            assert p.backends[backend].is_running(rid)
            p.finish(rid, now, 100)
            ended.add(rid)
        apply(p.poll(now))
    while running or p.queued():
        now += 1.0
        for rid in list(running):
            running.pop(rid)
            p.finish(rid, now, 100)
            ended.add(rid)
        apply(p.poll(now))
    assert ended == {f"r{i}" for i in range(400)}
    assert p.load == 0 and p.queued() == 0
    assert len(set(admitted.values())) == 3  # every backend served


def test_the_backends_share_what_they_learn_of_lengths():
    p = pool(flat(60.0), flat(60.0), place="least-loaded")
    served = set()
    for i in range(60):
        ((rid, backend),) = admissions(p.offer(req(f"r{i}", float(i)), float(i))).items()
        served.add(backend)
        p.finish(rid, float(i) + 0.5, 20)  # answers far shorter than the configured 100
    assert served == {0}  # both idle each time: the first
    # What backend 0 learned, backend 1 decides with.
    assert p.backends[1].lengths.expected(TASK, None) < 80


def test_a_pool_is_built_right_or_not_at_all():
    with pytest.raises(ValueError, match="share one TaskLengths"):
        Pool([Scheduler(flat(10.0), tasks=[TASK]), Scheduler(flat(10.0), tasks=[TASK])])
    with pytest.raises(ValueError, match="unknown placement"):
        Pool.build([flat(10.0)], tasks=[TASK], place="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        Pool([])
    lengths = TaskLengths([TASK])
    ok = Pool([Scheduler(flat(10.0), tasks=[TASK], lengths=lengths)])
    assert ok.lengths is lengths


def test_load_from_elsewhere_slows_every_prediction_but_never_idles_the_engine():
    sched = Scheduler(flat(60.0, slope=0.1), default(max_concurrency=8), tasks=[TASK])
    alone = sched.predicted_speed(1)
    sched.set_elsewhere(seen=4, headroom=2, now=0.0)
    assert sched.predicted_speed(1) == pytest.approx(flat(60.0, slope=0.1)(7))
    assert not sched.engine_idle
    # 300 tokens in 10 s needs 30 tok/s: f(7) = 37.5 still passes, f(11) = 30 would not.
    assert admissions_of(sched.offer(req("a", 0.0, 300), 0.0)) == ["a"]
    sched.set_elsewhere(seen=8, headroom=2, now=0.1)
    assert sched.predicted_speed(1) == pytest.approx(alone / 2)  # f(11)
    # Others' requests gone, only the headroom left: the engine is idle, and a
    # request no prediction admits still runs.
    sched.finish("a", 1.0, 300)
    sched.set_elsewhere(seen=0, headroom=50, now=1.0)
    assert sched.engine_idle
    assert admissions_of(sched.offer(req("b", 1.0, 5000), 1.0)) == ["b"]


def admissions_of(decisions) -> list[str]:
    return [d.request.id for d in decisions if d.action is Action.ADMIT]


def test_a_request_the_pool_cannot_take_leaves_nothing_behind():
    p = pool(flat(60.0), flat(60.0), max_concurrency=2)
    too_big = request_for(TASK, id="big", arrival=0.0, tokens=50, seqs=3)
    with pytest.raises(ValueError, match="max_concurrency"):
        p.offer(too_big, 0.0)
    assert p.backend_of("big") is None
    assert admissions(p.offer(req("big", 0.0, 50), 0.0)) == {"big": 0}  # the id is free


def test_one_of_several_gateways_counts_the_arrivals_it_does_not_see():
    """Behind M gateways each sees 1/M of the arrivals, yet one more sequence slows the
    arrivals of all M: what a long request costs those to come is M times what one
    gateway sees arrive."""
    qna = TaskType(name="q", mean_input_tokens=20, mean_output_tokens=40, sla_s=0.8, max_tokens=80)

    def value(share: float) -> float:
        sched = Scheduler(flat(60.0, slope=0.05), default(max_concurrency=64), tasks=[TASK, qna])
        sched.set_arrival_share(share)
        now = 0.0
        for i in range(40):  # 20 short answers a second, two at a time running
            now += 0.05
            sched.offer(request_for(qna, id=f"s{i}", arrival=now), now)
            if i >= 2:
                sched.finish(f"s{i - 2}", now, 40)
        return sched.placement_value(req("long", now, 300), now)

    alone, quarter = value(1.0), value(0.25)
    cost = 1.0 - alone  # its own chance is 1: the rest is what it costs the others
    assert 0 < cost < 0.01
    # About four times the future's share of it (the streams' own admissions differ a
    # little); the two running answers' share stays.
    assert 3 * cost < 1.0 - quarter < 5 * cost
    with pytest.raises(ValueError, match="arrival share"):
        Scheduler(flat(60.0), tasks=[TASK]).set_arrival_share(0.0)


def full_fast_and_slow_with_one_waiting() -> Pool:
    """A backend twice as fast as the other, both full (two each), and a request
    waiting at the fast one, where it was placed."""
    p = pool(flat(120.0), flat(60.0), max_concurrency=2)
    on = {}
    for rid in "abcd":
        on |= admissions(p.offer(req(rid, 0.0, 50), 0.0))
    assert on == {"a": 0, "b": 0, "c": 1, "d": 1}
    assert admissions(p.offer(req("e", 0.0, 50), 0.0)) == {}
    assert p.backend_of("e") == 0
    return p


def test_a_waiting_request_does_not_move_to_a_slower_backend_that_is_busy():
    # A busy backend holds back what costs it most, the long requests; a slower one
    # with room would take exactly those. So it waits for its own backend.
    p = full_fast_and_slow_with_one_waiting()
    p.finish("c", 1.0, 50)
    assert admissions(p.poll(1.0)) == {}
    assert p.is_queued("e") and p.backends[1].load == 1
    p.finish("a", 2.0, 50)
    assert admissions(p.poll(2.0)) == {"e": 0}


def test_a_slower_backend_that_is_idle_takes_what_waits_elsewhere():
    # An idle engine is never kept idle while a request waits anywhere.
    p = full_fast_and_slow_with_one_waiting()
    p.finish("c", 1.0, 50)
    p.finish("d", 1.0, 50)
    assert admissions(p.poll(1.0)) == {"e": 1}


def test_what_waits_at_a_backend_out_of_service_moves_to_a_slower_one_with_room():
    p = full_fast_and_slow_with_one_waiting()
    p.finish("c", 1.0, 50)
    p.set_down(0, True)
    assert admissions(p.poll(1.0)) == {"e": 1}


def test_between_twins_a_waiting_request_moves_to_whichever_has_room():
    # Curves within 10% of each other (learned apart) are alike: no one is slower.
    q = pool(flat(60.0), flat(57.0), max_concurrency=2)
    on = {}
    for rid in "abcd":
        on |= admissions(q.offer(req(rid, 0.0, 50), 0.0))
    assert sorted(on.values()) == [0, 0, 1, 1]
    assert admissions(q.offer(req("e", 0.0, 50), 0.0)) == {}
    home = q.backend_of("e")
    assert home is not None
    q.finish(next(r for r, b in on.items() if b != home), 1.0, 50)
    assert admissions(q.poll(1.0)) == {"e": 1 - home}


def test_a_backend_out_of_service_takes_nothing_and_what_waits_there_moves_on():
    p = pool(flat(60.0), flat(60.0), max_concurrency=1)
    p.set_down(0, True)
    # Nothing is placed on the backend that is down, even idle and first in line.
    assert admissions(p.offer(req("a", 0.0, 50), 0.0)) == {"a": 1}
    assert admissions(p.offer(req("b", 0.0, 50), 0.0)) == {}
    assert p.backend_of("b") == 1 and p.backends[0].load == 0
    # Back in service, it takes what waits elsewhere at once.
    p.set_down(0, False)
    assert admissions(p.poll(0.5)) == {"b": 0}
    # Taken out again while a request waits there: the request moves when the other
    # backend frees, and the backend that is down admits nothing in the meantime.
    on = {0: "b", 1: "a"}
    assert admissions(p.offer(req("c", 1.0, 50), 1.0)) == {}
    home = p.backend_of("c")
    assert home is not None
    p.set_down(home, True)
    p.finish(on[home], 2.0, 50)  # its own backend frees: it is down, so c stays
    assert admissions(p.poll(2.0)) == {}
    p.finish(on[1 - home], 3.0, 50)
    assert admissions(p.poll(3.0)) == {"c": 1 - home}
    assert p.is_running("c") and not p.is_queued("c")


def test_with_every_backend_down_the_pool_serves_as_if_all_were_up():
    # Nowhere else to go: a request tries (and fails cleanly upstream) rather than wait.
    p = pool(flat(60.0), flat(60.0))
    p.set_down(0, True)
    p.set_down(1, True)
    assert not any(b.paused for b in p.backends)
    assert len(admissions(p.offer(req("a", 0.0, 50), 0.0))) == 1
    single = pool(flat(60.0))
    single.set_down(0, True)
    assert admissions(single.offer(req("a", 0.0, 50), 0.0)) == {"a": 0}
    p.set_down(0, False)
    assert p.backends[1].paused and not p.backends[0].paused


def test_time_to_free_is_the_soonest_over_the_backends():
    p = pool(flat(50.0), flat(10.0))
    assert p.time_to_free(0.0) is None
    p.offer(req("fast", 0.0, 100), 0.0)
    p.offer(req("slow", 0.0, 100), 0.0)
    soonest = min(b.time_to_free(0.0) for b in p.backends if b.load)
    assert p.time_to_free(0.0) == pytest.approx(soonest)


def test_time_to_room_is_the_soonest_over_the_backends_each_behind_its_own_queue():
    p = pool(flat(50.0), flat(10.0), max_concurrency=1)
    assert p.time_to_room("t", 0.0) is None  # nothing runs: room at once
    p.offer(req("fast", 0.0, 100), 0.0)
    p.offer(req("slow", 0.0, 100), 0.0)
    assert p.load == 2
    rooms = [b.time_to_free(0.0, 0.8, b.slots_until_room("t")) for b in p.backends]
    assert p.time_to_room("t", 0.0, 0.8) == min(rooms)
    p.set_down(0, True)  # a backend out of service frees no room for what waits
    assert p.time_to_room("t", 0.0, 0.8) == rooms[1]
