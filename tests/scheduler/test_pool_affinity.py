"""Session affinity in a pool: a session's requests stay on the backend its key hashes
to (rendezvous over the backends in service) while that costs at most the margin of
the best backend's value; off, every decision is as without it."""

from __future__ import annotations

import random

import pytest
from test_chance import task

from saber.config import TaskType
from saber.scheduler import Action, Placed, Policy, Pool, request_for
from saber.scheduler.pool._sharing import rendezvous

PINNED = [0, 2, 0, 3, 3, 0, 0, 0]
TASK = TaskType(name="t", mean_input_tokens=50, mean_output_tokens=100, sla_s=10.0, max_tokens=400)


def sloped(speed: float, slope: float):
    return lambda load: speed / (1 + slope * (load - 1))


def pool(n: int, margin: float | None, place: str = "chance", slope: float = 0.2) -> Pool:
    return Pool.build(
        [sloped(60.0, slope)] * n,
        Policy.named("closed-loop", max_concurrency=64),
        tasks=[TASK],
        place=place,  # type: ignore[arg-type]
        affinity_margin=margin,
    )


def req(rid: str, now: float, tokens: int, key: str | None = None):
    return request_for(TASK, id=rid, arrival=now, tokens=tokens, affinity=key)


def admitted(placed: list[Placed]) -> dict[str, int]:
    return {p.decision.request.id: p.backend for p in placed if p.decision.action is Action.ADMIT}


def key_on(backend: int, of: list[int]) -> str:
    """A session key whose backend, among ``of``, is ``backend``."""
    names = [str(i) for i in of]
    return next(k for i in range(1000) if of[rendezvous(k := f"s{i}", names)] == backend)


def test_a_session_stays_on_its_backend_while_that_costs_less_than_the_margin() -> None:
    # Short answers: a certain chance anywhere, a little cost for each one running.
    key = key_on(2, [0, 1, 2])
    p = pool(3, 0.05)
    homes = [admitted(p.offer(req(f"r{i}", 0.0, 20, key), 0.0))[f"r{i}"] for i in range(6)]
    assert homes == [2] * 6
    assert (p.affinity.kept, p.affinity.broken) == (6, 0)
    # Without affinity the same stream spreads (a loaded backend is worth a little less).
    q = pool(3, None)
    spread = [admitted(q.offer(req(f"r{i}", 0.0, 20, key), 0.0))[f"r{i}"] for i in range(6)]
    assert len(set(spread)) == 3
    assert (q.affinity.kept, q.affinity.broken) == (0, 0)


@pytest.mark.parametrize(("margin", "home"), [(0.05, 0), (0.004, 1), (None, 1)])
def test_a_backend_worth_a_little_less_keeps_the_session_within_the_margin_only(
    margin: float | None, home: int
) -> None:
    # One 300-token answer running on the session's backend costs the next about 0.008.
    # Within the margin the next stays there; past it, it runs on the other.
    key = key_on(0, [0, 1])
    p = pool(2, margin)
    p.offer(req("a", 0.0, 300), 0.0)
    assert p.backend_of("a") == 0
    values = [b.placement_value(req("probe", 0.1, 300), 0.1) for b in p.backends]
    assert 0.004 < values[1] - values[0] < 0.05
    assert admitted(p.offer(req("b", 0.1, 300, key), 0.1)) == {"b": home}
    assert p.backend_of("b") == home
    if margin is not None:
        assert (p.affinity.kept, p.affinity.broken) == ((1, 0) if home == 0 else (0, 1))


def test_the_affinity_breaks_when_its_backend_is_worth_more_than_the_margin_less() -> None:
    # 300 tokens in 10 s need 30 tok/s: f(1) = 60 makes it, f(21) = 60 / 5 = 12 does not.
    key = key_on(0, [0, 1])
    p = pool(2, 0.05)
    assert admitted(p.offer(req("a", 0.0, 300, key), 0.0)) == {"a": 0}
    p.set_elsewhere(0, seen=19, headroom=0, now=0.1)  # other gateways' load there
    values = [b.placement_value(req("probe", 0.1, 300), 0.1) for b in p.backends]
    assert values[0] < values[1] - 0.05
    assert admitted(p.offer(req("b", 0.1, 300, key), 0.1)) == {"b": 1}
    assert (p.affinity.kept, p.affinity.broken) == (1, 1)
    # The load gone, the session is back on its own backend.
    p.set_elsewhere(0, seen=0, headroom=0, now=0.2)
    assert admitted(p.offer(req("c", 0.2, 300, key), 0.2)) == {"c": 0}
    assert (p.affinity.kept, p.affinity.broken) == (2, 1)
    # A margin wide enough keeps it there whatever the loss, while it admits.
    wide = pool(2, 1.0)
    wide.set_elsewhere(0, seen=1, headroom=0, now=0.0)
    assert admitted(wide.offer(req("d", 0.0, 300, key), 0.0)) == {"d": 0}


def test_a_backend_down_moves_only_its_own_sessions_and_they_come_back() -> None:
    p = pool(3, 0.05)
    keys = [f"team{i}/editor{i % 7}" for i in range(90)]
    now = 0.0

    def homes() -> dict[str, int]:
        nonlocal now
        out = {}
        for k in keys:
            now += 0.01
            rid = f"r{now:.2f}"
            out[k] = admitted(p.offer(req(rid, now, 20, k), now))[rid]
            p.cancel(rid, now)  # nothing stays: each request finds the pool idle
        return out

    before = homes()
    assert set(before.values()) == {0, 1, 2}  # the sessions spread over the backends
    assert all(before[k] == rendezvous(k, ["0", "1", "2"]) for k in keys)
    p.set_down(1, True)
    during = homes()
    moved = {k for k in keys if during[k] != before[k]}
    assert moved == {k for k in keys if before[k] == 1}
    assert all(during[k] in (0, 2) for k in moved)
    p.set_down(1, False)
    assert homes() == before
    assert p.affinity.broken == 0


@pytest.mark.parametrize("place", ["chance", "round-robin", "least-loaded"])
def test_without_a_margin_every_decision_is_as_before(place: str) -> None:
    """A mixed stream (lengths, finishes, a backend down and up) decides the same with
    affinity off and keys on every request as with no keys at all; and under the
    baselines, the same with affinity on."""

    def run(margin: float | None, keyed: bool) -> list[tuple[Action, str, int]]:
        rng = random.Random(11)
        p = pool(3, margin, place, slope=0.1)
        now, running, seen = 0.0, [], []
        for i in range(400):
            now += rng.expovariate(8.0)
            if i == 150:
                p.set_down(2, True)
            if i == 260:
                p.set_down(2, False)
            for rid in [r for r in running if rng.random() < 0.3]:
                running.remove(rid)
                p.finish(rid, now, 80)
            session = f"s{rng.randrange(12)}"  # drawn either way: one random stream
            r = req(f"r{i}", now, rng.randint(10, 600), session if keyed else None)
            placed = p.offer(r, now) + p.poll(now)
            seen += [(x.decision.action, x.decision.request.id, x.backend) for x in placed]
            running += [x.decision.request.id for x in placed if x.decision.action is Action.ADMIT]
        return seen

    today = run(None, keyed=False)
    assert len(today) > 300
    assert run(None, keyed=True) == today
    assert run(0.05, keyed=False) == today
    if place != "chance":
        assert run(0.05, keyed=True) == today
    else:
        assert run(0.05, keyed=True) != today  # the test can tell affinity apart


def test_rendezvous_is_stable_and_a_margin_is_a_chance() -> None:
    # The same in every process (no salted hash): pinned, and spread over the backends.
    homes = [rendezvous(f"k{i}", ["0", "1", "2", "3"]) for i in range(400)]
    assert homes[:8] == PINNED
    assert all(80 <= homes.count(b) <= 120 for b in range(4)), [homes.count(b) for b in range(4)]
    # A backend gone moves only the keys that were on it.
    for i, home in enumerate(homes):
        if home != 3:
            assert rendezvous(f"k{i}", ["0", "1", "2"]) == home
    # Hashed by name, not position: the backends listed in another order keep each
    # session on the same-named backend.
    names = ["gpu-a", "gpu-b", "gpu-c"]
    for i in range(100):
        home = names[rendezvous(f"k{i}", names)]
        flipped = names[::-1]
        assert flipped[rendezvous(f"k{i}", flipped)] == home
    with pytest.raises(ValueError, match="affinity margin"):
        pool(2, 1.5)
    with pytest.raises(ValueError, match="affinity margin"):
        pool(2, -0.1)


def test_a_session_request_its_backend_holds_for_later_waits_there() -> None:
    # A session streams short requests, twenty a second, onto its backend; the other
    # backend is idle and would run its long request (due in 10 minutes) at once. On its
    # own backend that request is worth more once the stream has passed: it waits there
    # for its prefix cache (Pool._stays), and runs there when the short ones are done.
    short, long = task("s", 20, 0.25, cap=64), task("l", 1000, 600.0, cap=4096)
    p = Pool.build(
        [sloped(100.0, 0.02)] * 2,
        Policy.named("closed-loop", max_concurrency=256, future_weight=0.5),
        tasks=[short, long],
        affinity_margin=0.5,
    )
    key = key_on(0, [0, 1])
    now = 0.0
    for i in range(100):
        now = i * 0.05
        p.offer(request_for(short, id=f"s{i}", arrival=now, max_tokens=64, affinity=key), now)
        for done in p.backends[0].running():
            if done.admitted_at is not None and now - done.admitted_at > 0.2:
                p.finish(done.id, now, 20)
    assert not p.backends[1].running()
    assert admitted(p.offer(request_for(long, id="long", arrival=now, affinity=key), now)) == {}
    assert p.backend_of("long") == 0  # held where its session is, not moved
    later = now + 0.25
    for done in p.backends[0].running():
        p.finish(done.id, later, 20)
    assert admitted(p.poll(later)) == {"long": 0}
