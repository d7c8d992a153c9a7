"""Multi-step advance is an optimisation only: it must match single steps exactly."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from saber.config import load_tasks, load_workloads
from saber.engine import Engine, EngineRequest, get_preset
from saber.workload import generate_trace

PRESET = get_preset("l4-qwen2.5-coder-1.5b")


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 14))
    gaps = draw(st.lists(st.floats(0.0, 0.3), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 120), min_size=n, max_size=n))
    arrivals = [sum(gaps[: i + 1]) for i in range(n)]
    seqs = draw(st.integers(1, 8))
    budget = draw(st.sampled_from([seqs, 64, 256, 2048]))
    budget = max(budget, seqs)
    # small caches force preemption; the floor keeps every request admissible
    floor = max(p + o for p, o in zip(prompts, outputs, strict=True)) + 16
    kv = draw(st.one_of(st.integers(floor, floor + 160), st.integers(floor, 3000)))
    max_steps = draw(st.sampled_from([2, 7, 50, 10**9]))
    reqs = list(zip(arrivals, prompts, outputs, strict=True))
    return (
        reqs,
        dict(max_num_seqs=seqs, max_num_batched_tokens=budget, kv_capacity_tokens=kv),
        max_steps,
    )


def drive(reqs, config, *, multi: int | None) -> dict[str, tuple]:
    """Feed arrivals at step boundaries, as the simulator does, and run to the end."""
    engine = Engine(PRESET, **config)
    pending = [EngineRequest(f"r{i}", p, o, arrival=a) for i, (a, p, o) in enumerate(reqs)]
    every = list(pending)
    emitted = {r.id: 0 for r in every}
    now = 0.0
    while True:
        while pending and pending[0].arrival <= now:
            engine.add(pending.pop(0))
        until = pending[0].arrival if pending else None
        if engine.idle:
            if until is None:
                break
            now = until
            continue
        res = engine.step(now) if multi is None else engine.step(now, max_steps=multi, until=until)
        assert res is not None
        for rid, k in res.tokens.items():
            emitted[rid] += k
        now = res.end
    return {
        r.id: (r.first_token_at, r.finished_at, r.generated, r.preemptions, emitted[r.id])
        for r in every
    }, engine.total_steps


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_multi_step_matches_single_steps(case):
    reqs, config, max_steps = case
    single, n_single = drive(reqs, config, multi=None)
    multi, n_multi = drive(reqs, config, multi=max_steps)
    assert n_single == n_multi
    for rid, (first, finish, generated, preemptions, emitted) in single.items():
        m_first, m_finish, m_generated, m_preemptions, m_emitted = multi[rid]
        assert math.isclose(first, m_first, rel_tol=1e-9)
        assert math.isclose(finish, m_finish, rel_tol=1e-9)
        assert generated == m_generated == emitted == m_emitted
        assert preemptions == m_preemptions


def test_a_long_decode_run_is_one_call():
    engine = Engine(PRESET)
    for i in range(64):
        engine.add(EngineRequest(f"r{i}", 30, 2000))  # 64 * 30 prefills in one step
    first = engine.step(0.0)
    assert first is not None
    res = engine.step(first.end, max_steps=10**9)
    assert res is not None and res.steps == 1999 and len(res.finished) == 64


def test_multi_step_matches_single_steps_on_a_paper_workload_with_preemption():
    tasks = load_tasks()
    trace = generate_trace(load_workloads()["W1"], tasks, rps=15, n=150, seed=2)
    reqs = [(r.arrival, r.prompt_tokens, r.output_tokens) for r in trace]
    config = dict(max_num_seqs=64, max_num_batched_tokens=2048, kv_capacity_tokens=20_000)
    single, n_single = drive(reqs, config, multi=None)
    multi, n_multi = drive(reqs, config, multi=10**9)
    assert n_single == n_multi
    assert sum(v[3] for v in single.values()) > 0  # preemptions happened
    for rid, values in single.items():
        assert math.isclose(values[0], multi[rid][0], rel_tol=1e-9)
        assert math.isclose(values[1], multi[rid][1], rel_tol=1e-9)
        assert values[2:] == multi[rid][2:]
