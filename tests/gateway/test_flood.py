"""A flood of requests with a known profile: the gateway holds back exactly when
Algorithm 1 says so, never loads the backend past what it predicted was safe, and
demotes requests that can no longer make their deadline.

The gateway records every call it makes into the scheduler. The test checks that
record twice: it replays it into a fresh scheduler (the decisions must be the pure
core's, one for one), and it rebuilds the queues itself and checks every admission,
every hold and every demotion against Algorithm 1 with the known f(L).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from gateway_support import KNOWN, GatewayFactory

from saber.gateway import RunningGateway
from saber.gateway.admission.driver import TraceEntry
from saber.scheduler import Action, SchedRequest, Scheduler, Tier
from saber.sim.http import RunningSim, serve_in_thread

EPS = 1e-9
WINDOW = 4
N_REQUESTS = 60
TASKS = {
    # 100 tokens in 1 s needs 100 tok/s: f(L+1) >= 100 allows about 32 at once.
    "flood": {"mean_input_tokens": 50, "mean_output_tokens": 100, "sla_s": 1.0, "max_tokens": 100},
    "tight": {"mean_input_tokens": 20, "mean_output_tokens": 40, "sla_s": 0.5, "max_tokens": 40},
}


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[RunningSim]:
    # At time scale 2 one request gets at most ~260 tokens/s.
    with serve_in_thread(time_scale=2.0, max_num_seqs=512) as running:
        yield running


@dataclass
class SimWatch:
    max_running: float = 0.0


def watch_sim(sim: RunningSim, stop: threading.Event, out: SimWatch) -> None:
    with httpx.Client() as c:
        while not stop.is_set():
            state = c.get(sim.url + "/sim/state").json()
            out.max_running = max(out.max_running, state["num_running"])
            time.sleep(0.003)


def test_flood_follows_algorithm_1(gateway_factory: GatewayFactory, slow_sim: RunningSim) -> None:
    gw = gateway_factory(
        slow_sim.url,
        trace=True,
        seed=7,
        policy="paper",
        window_size=WINDOW,
        max_concurrency=None,
        queue_cap=None,
        tasks=TASKS,
        default_task="flood",
        rules=[],
        aliases={},
    )
    stop, seen = threading.Event(), SimWatch()
    watcher = threading.Thread(target=watch_sim, args=(slow_sim, stop, seen))
    watcher.start()
    try:
        outcomes = flood(gw, slow_sim)
    finally:
        stop.set()
        watcher.join()
    assert set(outcomes) <= {"admitted", "admitted_demoted"}

    trace = list(gw.gateway.admission.trace or [])
    replay_matches(trace, gw)
    stats = check_algorithm_1(trace, gw.gateway.scheduler.max_speed)
    assert stats.holds > 0, "the flood should have been held back at some point"
    assert stats.demotions > 0, "some requests should have become hopeless and been demoted"
    assert stats.lpq_admissions > 0
    assert stats.max_load < N_REQUESTS
    # The backend never ran more requests than the gateway had admitted.
    assert 0 < seen.max_running <= stats.max_load


def flood(gw: RunningGateway, sim: RunningSim) -> list[str]:
    # All at once: threads started one by one on a busy machine once spread the flood so
    # thinly that every held request found a slot in time (no demotion at all).
    start = threading.Barrier(N_REQUESTS, timeout=30)

    def one(i: int) -> str:
        task = "tight" if i % 4 == 0 else "flood"
        start.wait()
        # A flood request really generates 300 tokens while the gateway expects 100
        # (its task's expectation caps max_tokens), so no slot frees up for at least
        # 300 / 260 s: whatever is held back meanwhile must become hopeless.
        tokens = 40 if task == "tight" else 300
        r = httpx.post(
            gw.url + "/v1/completions",
            json={
                "model": sim.model,
                "prompt": "def f():" * 8,
                "max_tokens": tokens,
                "ignore_eos": True,
            },
            headers={"x-saber-task": task},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        return r.headers["x-saber-outcome"]

    with ThreadPoolExecutor(N_REQUESTS) as pool:
        return list(pool.map(one, range(N_REQUESTS)))


def replay_matches(trace: list[TraceEntry], gw: RunningGateway) -> None:
    """The same calls into a fresh scheduler give the same decisions, one for one."""
    g = gw.gateway
    fresh = Scheduler(g.scheduler.speed_model, g.policy, seed=g.seed)
    for e in trace:
        if e.call == "offer":
            assert isinstance(e.arg, SchedRequest)
            r = e.arg
            got = fresh.offer(SchedRequest(r.id, r.task, r.arrival, r.deadline, r.tokens), e.now)
        elif e.call in ("poll", "timer"):
            got = fresh.poll(e.now)
        else:
            getattr(fresh, e.call)(e.arg, e.now)
            continue
        assert [key(d) for d in got] == [key(d) for d in e.decisions]
    assert fresh.load == 0 and fresh.queued() == 0


def key(d: object) -> tuple[object, ...]:
    return (d.action, d.request.id, d.tier, d.outcome, d.at)  # type: ignore[attr-defined]


@dataclass
class Stats:
    holds: int = 0
    demotions: int = 0
    lpq_admissions: int = 0
    max_load: int = 0


def check_algorithm_1(trace: list[TraceEntry], f1: float) -> Stats:
    f = KNOWN.predict
    hpq: dict[str, SchedRequest] = {}
    lpq: dict[str, SchedRequest] = {}
    running: dict[str, float] = {}  # id -> the speed it needed when admitted (0 from the LPQ)
    stats = Stats()

    def need(r: SchedRequest, now: float) -> float:
        return r.tokens / (r.deadline - now) if r.deadline > now else float("inf")

    for e in trace:
        if e.call == "offer":
            assert isinstance(e.arg, SchedRequest)
            hpq[e.arg.id] = e.arg
        elif e.call in ("finish", "fail", "cancel"):
            assert isinstance(e.arg, str)
            for place in (hpq, lpq, running):
                place.pop(e.arg, None)
        for d in e.decisions:
            r = d.request
            assert d.at == e.now
            if d.action is Action.DEMOTE:
                # Demoted exactly when its required speed passed f(1).
                assert e.now >= r.deadline - r.tokens / f1 - EPS
                lpq[r.id] = hpq.pop(r.id)
                stats.demotions += 1
            elif d.action is Action.ADMIT and d.tier is Tier.HIGH:
                predicted = f(len(running) + 1)
                front = sorted(hpq.values(), key=lambda q: (q.arrival, q.id))[:WINDOW]
                assert r.id in {q.id for q in front}, "admitted from outside the window"
                assert predicted >= need(r, e.now) - EPS, "admitted a request f(L+1) cannot serve"
                assert predicted >= max(running.values(), default=0.0) - EPS, (
                    "admission broke a running request's required speed"
                )
                running[r.id] = need(hpq.pop(r.id), e.now)
            elif d.action is Action.ADMIT:
                assert not hpq, "the LPQ is served only when every HPQ is empty"
                oldest = min(lpq.values(), key=lambda q: (q.arrival, q.id))
                assert r.id == oldest.id
                lpq.pop(r.id)
                running[r.id] = 0.0
                stats.lpq_admissions += 1
            else:
                for place in (hpq, lpq):
                    place.pop(r.id, None)
            stats.max_load = max(stats.max_load, len(running))
        if e.call in ("finish", "fail", "cancel"):
            continue  # the poll that follows a release is its own entry
        # After every poll: nothing hopeless is left in an HPQ ...
        assert all(q.deadline - q.tokens / f1 > e.now - EPS for q in hpq.values())
        # ... and whatever still waits there is held back for Algorithm 1's reason.
        if hpq:
            stats.holds += 1
            predicted = f(len(running) + 1)
            front = sorted(hpq.values(), key=lambda q: (q.arrival, q.id))[:WINDOW]
            blocked = predicted < max(running.values(), default=0.0)
            assert blocked or all(need(q, e.now) > predicted for q in front)
    assert not hpq and not lpq and not running
    return stats
