"""Several gateways in front of one pool of replicas, each its own ``Pool``, knowing of
each other only by scraping the replicas (``simulate_cluster(gateways=...)``)."""

from __future__ import annotations

import dataclasses
import math
import zlib

import pytest

from saber.config import TaskType, load_tasks, load_workloads
from saber.engine import Engine, get_preset
from saber.scheduler import Policy, Pool, derived_headroom
from saber.sim import gateway_of, simulate_cluster
from saber.workload import TraceRequest, generate_trace

TASKS = load_tasks()
WORKLOADS = load_workloads(tasks=TASKS)
PAPER = get_preset("paper")


def usl(f1: float, slope: float):
    return lambda load: f1 / (1 + slope * (load - 1))


def pool(replicas: int = 2) -> Pool:
    """A saber pool over ``replicas`` paper engines, each with a rough f(L) of its own."""
    speeds = [usl(45.0, 0.02) for _ in range(replicas)]
    return Pool.build(speeds, Policy.named("closed-loop"), tasks=TASKS)


def trace(workload: str = "W1", rps: float = 12.0, n: int = 120, seed: int = 0):
    return generate_trace(WORKLOADS[workload], TASKS, rps=rps, n=n, seed=seed, mode="realistic")


class Recording(Pool):
    """A pool that notes each scrape: its time, and per backend what it heard and the
    speed its scheduler then predicts for one more request; and each wait for a first
    token it was handed (the scrape's time, the backend, the wait)."""

    scrapes: list[tuple[float, int, int, int, float]]
    waits: list[tuple[float, int, float]]

    def set_elsewhere(self, backend: int, seen: int, headroom: int, now: float) -> None:
        super().set_elsewhere(backend, seen, headroom, now)
        speed = self.backends[backend].predicted_speed(1)
        self.scrapes.append((now, backend, seen, headroom, speed))

    def set_first_token_wait(self, backend: int, seconds: float) -> None:
        super().set_first_token_wait(backend, seconds)
        self.waits.append((self.scrapes[-1][0], backend, seconds))  # set_elsewhere's, just before


def recording(replicas: int = 1, task: TaskType | None = None) -> Recording:
    tasks = [task] if task else TASKS
    p = Recording.build([usl(45.0, 0.02)] * replicas, Policy.named("closed-loop"), tasks=tasks)
    assert isinstance(p, Recording)
    p.scrapes, p.waits = [], []
    return p


def test_one_gateway_is_the_single_pool_path():
    reqs = trace("W3", 25.0, n=100)
    runs = []
    for key in ("pool", "gateways"):
        p = pool()
        engines = [Engine(PAPER), Engine(PAPER)]
        arg = {"pool": p} if key == "pool" else {"gateways": [p]}
        runs.append(simulate_cluster(reqs, engines, tasks=TASKS, **arg))
    alone, one = runs
    assert one.records == alone.records and one.served_by == alone.served_by
    assert (one.engine_calls, one.steps, one.end) == (alone.engine_calls, alone.steps, alone.end)
    assert one.backends == alone.backends and one.gateways == alone.gateways
    (stats,) = one.gateways
    assert stats.scrapes == 0 and stats.offered == 100
    assert stats.unseen_steps == stats.max_unseen == (0, 0)  # it knows everything


@pytest.mark.parametrize("headroom", [None, 0])
def test_two_gateways_answer_every_request_once_and_leak_no_slot(headroom):
    reqs = trace("W1", 40.0, n=120)
    pools = [pool(3), pool(3)]
    engines = [Engine(PAPER) for _ in range(3)]
    res = simulate_cluster(reqs, engines, tasks=TASKS, gateways=pools, headroom=headroom)
    assert [r.id for r in res.records] == [r.id for r in reqs] and not res.unfinished
    for rec in res.records:
        assert (rec.finished_at is None) == rec.rejected
        assert (rec.id in res.served_by) == (not rec.rejected)
    assert sum(b.served for b in res.backends) == sum(b.finished for b in res.backends)
    assert sum(b.served for b in res.backends) == sum(not r.rejected for r in res.records)
    for p in pools:  # every admission heard its finish, nothing is left waiting
        assert p.load == 0 and p.queued() == 0
    owners = [gateway_of(r.id, 2) for r in reqs]
    assert [g.offered for g in res.gateways] == [owners.count(0), owners.count(1)]
    assert all(0 < g.offered < 120 for g in res.gateways)
    for b in res.backends:
        assert b.max_in_engine >= b.max_running


def test_a_scrape_shows_a_gateway_what_the_other_runs():
    # Twelve long requests, all hashed to gateway 0, at t = 0.005..0.115 on one replica;
    # gateway 1 first scrapes at 0.1 (its phase: 1 x 0.2 s / 2), then every 0.2 s.
    task = TaskType(
        name="long", mean_input_tokens=100, mean_output_tokens=400, sla_s=60.0, max_tokens=400
    )
    ids = [i for i in (f"r{k}" for k in range(200)) if zlib.crc32(i.encode()) % 2 == 0][:12]
    reqs = [TraceRequest(i, "long", 0.005 + 0.01 * k, 100, 400, 400) for k, i in enumerate(ids)]
    a, b = recording(task=task), recording(task=task)
    solo = b.backends[0].predicted_speed(1)
    res = simulate_cluster(reqs, [Engine(PAPER)], tasks={"long": task}, gateways=[a, b])
    assert not res.unfinished and res.gateways[1].offered == 0
    first = b.scrapes[0]
    assert first[0] == pytest.approx(0.1) and first[1:4] == (0, 10, 0)  # r0..r9 by then
    assert first[4] < solo  # f read at 1 + 10
    assert first[4] == pytest.approx(b.backends[0].calibration * 45.0 / (1 + 0.02 * 10))
    # Gateway 0 admitted all twelve: its first scrapes count 0 elsewhere and 1 x its own
    # admissions since the last one as headroom; its last, once all is idle, 0 and 0.
    assert [s[0] for s in a.scrapes[:3]] == pytest.approx([0.0, 0.2, 0.4])
    assert a.scrapes[1][2:4] == (0, 12) and a.scrapes[-1][2:4] == (0, 0)
    assert b.scrapes[-1][2:4] == (0, 0)
    assert math.isclose(b.backends[0].predicted_speed(1), b.scrapes[-1][4])


def test_a_scrape_shows_each_gateway_the_engines_wait_for_first_tokens():
    """As the gateway reads vLLM's histogram: at each scrape, the mean time to first
    token of every gateway's requests that made their first one at the replica since
    the gateway's scrape before; nothing where none did."""
    reqs = trace("W1", 30.0, n=90)
    pools = [recording(2), recording(2)]
    res = simulate_cluster(reqs, [Engine(PAPER), Engine(PAPER)], tasks=TASKS, gateways=pools)
    firsts = [
        (res.served_by[r.id], r.first_token_at, r.first_token_at - r.admitted_at)
        for r in res.records
        if r.first_token_at is not None and r.admitted_at is not None
    ]
    assert len(firsts) == 90
    for g, p in enumerate(pools):
        heard = 0
        for b in (0, 1):
            times = sorted({t for t, backend, *_ in p.scrapes if backend == b})
            expected = []
            for before, at in zip([-math.inf, *times], times, strict=False):
                made = [w for (bb, t, w) in firsts if bb == b and before <= t < at]
                if made:
                    expected.append((at, b, pytest.approx(sum(made) / len(made))))
            got = [w for w in p.waits if w[1] == b]
            assert got == expected, (g, b)
            heard += sum(1 for (bb, t, _) in firsts if bb == b and t < times[-1])
        # Each gateway heard of every first token, its own and the other's requests'.
        assert heard == 90 and res.gateways[g].offered < 90


def test_gateways_scrape_staggered_and_a_fixed_headroom_is_used_as_is():
    reqs = trace("W3", 20.0, n=80)
    pools = [recording(2) for _ in range(3)]
    res = simulate_cluster(
        reqs, [Engine(PAPER), Engine(PAPER)], tasks=TASKS, gateways=pools, scrape_s=0.15,
        headroom=4,
    )  # fmt: skip
    for g, p in enumerate(pools):
        # The fixed headroom is kept from the start, before any scrape.
        assert p.scrapes[:2] == [(0.0, b, 0, 4, p.scrapes[b][4]) for b in (0, 1)]
        times = sorted({s[0] for s in p.scrapes[2:]})
        assert times == pytest.approx([g * 0.05 + k * 0.15 for k in range(len(times))])
        assert {s[3] for s in p.scrapes} == {4}
        assert res.gateways[g].scrapes == len(times)
    assert max(s[2] for p in pools for s in p.scrapes) > 0  # each saw the others' work


@pytest.mark.parametrize(("gateways", "headroom"), [(2, 6), (3, 6), (4, 2)])
def test_a_fixed_headroom_bounds_what_no_gateway_counted(gateways, headroom):
    # Each gateway keeps to budget_of(headroom, M) admissions per replica per scrape
    # interval: at no step's start does a replica hold more than some gateway's view
    # (own + seen + headroom), where the derived headroom leaves some unseen.
    reqs = trace("W2", 120.0, n=300, seed=2)
    unseen = {}
    for fixed in (None, headroom):
        res = simulate_cluster(
            reqs, [Engine(PAPER), Engine(PAPER)], tasks=TASKS,
            gateways=[pool() for _ in range(gateways)], headroom=fixed,
        )  # fmt: skip
        assert not res.unfinished
        unseen[fixed] = max(max(g.max_unseen) for g in res.gateways)
    bound = max(headroom, gateways - 1) - headroom  # budget_of's floor of 1 each
    assert unseen[headroom] <= bound < unseen[None]


def test_no_headroom_leaves_more_unseen_than_the_derived_one():
    # Three gateways, two replicas: 251 step starts with some view short without a
    # headroom, 191 with it (when this test was written).
    reqs = trace("W1", 20.0, n=100, seed=1)
    unseen = {}
    for headroom in (None, 0):
        res = simulate_cluster(
            reqs, [Engine(PAPER), Engine(PAPER)], tasks=TASKS,
            gateways=[pool() for _ in range(3)], headroom=headroom,
        )  # fmt: skip
        unseen[headroom] = sum(sum(g.unseen_steps) for g in res.gateways)
    assert unseen[0] > unseen[None] > 0


def test_the_derived_headroom():
    # One gateway knows everything; each other one is assumed to admit what this did.
    assert derived_headroom(1, 7) == 0
    assert derived_headroom(2, 3) == 3
    assert derived_headroom(4, 3) == 9
    assert derived_headroom(3, 0) == 0
    assert derived_headroom(3, 0.4) == 1  # rounded up: a fraction of a request is one
    for bad in ((0, 1), (2, -1)):
        with pytest.raises(ValueError):
            derived_headroom(*bad)


def test_bad_gateway_calls_are_refused():
    reqs = trace(n=5)
    p = pool()
    engines = [Engine(PAPER), Engine(PAPER)]
    with pytest.raises(ValueError, match="exactly one"):
        simulate_cluster(reqs, engines, tasks=TASKS, pool=p, gateways=[pool()])
    with pytest.raises(ValueError, match="at least one gateway"):
        simulate_cluster(reqs, engines, tasks=TASKS, gateways=[])
    with pytest.raises(ValueError, match="once"):
        simulate_cluster(reqs, engines, tasks=TASKS, gateways=[p, p])
    with pytest.raises(ValueError, match="scrape_s"):
        simulate_cluster(reqs, engines, tasks=TASKS, gateways=[p, pool()], scrape_s=0)
    with pytest.raises(ValueError, match="headroom"):
        simulate_cluster(reqs, engines, tasks=TASKS, gateways=[p, pool()], headroom=-1)
    assert dataclasses.is_dataclass(simulate_cluster(reqs, engines, tasks=TASKS, gateways=[p]))
