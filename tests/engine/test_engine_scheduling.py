"""The engine's scheduling: budget, chunked prefill, seats, KV cache, preemption, abort."""

from __future__ import annotations

import pytest
from engine_support import check_kv

from saber.engine import BLOCK_SIZE, Engine, EngineRequest, StepResult, get_preset

PRESET = get_preset("a10-qwen2.5-coder-3b")


def run_to_end(engine: Engine, now: float = 0.0, **kw) -> list[StepResult]:
    out = []
    while (res := engine.step(now, **kw)) is not None:
        out.append(res)
        now = res.end
    return out


def test_idle_engine_steps_to_none():
    assert Engine(PRESET).step(0.0) is None


def test_prefill_step_emits_the_first_token_and_finish_is_exact():
    engine = Engine(PRESET)
    req = EngineRequest("a", prompt_tokens=100, output_tokens=5)
    engine.add(req)
    first = engine.step(1.0)
    assert first is not None and first.start == 1.0
    assert first.tokens == {"a": 1} and first.first_tokens == {"a": first.end}
    assert req.first_token_at == first.end and req.started_at == 1.0
    results = run_to_end(engine, first.end)
    assert sum(r.steps for r in results) == 4
    assert req.generated == 5 and req.finished_at == results[-1].end
    assert results[-1].finished == [req]
    assert engine.idle and engine.kv_usage == 0.0


def test_single_token_output_finishes_on_its_prefill_step():
    engine = Engine(PRESET)
    req = EngineRequest("a", prompt_tokens=10, output_tokens=1)
    engine.add(req)
    res = engine.step(0.0)
    assert res is not None and res.finished == [req]
    assert req.first_token_at == req.finished_at == res.end


def test_long_prompt_is_prefilled_in_budget_sized_chunks():
    engine = Engine(PRESET, max_num_seqs=8, max_num_batched_tokens=512)
    req = EngineRequest("long", prompt_tokens=1300, output_tokens=3)
    engine.add(req)
    for computed in (512, 1024):
        res = engine.step(engine.clock if engine.total_steps else 0.0)
        assert res is not None and res.tokens == {}
        assert req.computed == computed
    res = engine.step(engine.clock)
    assert res is not None and res.tokens == {"long": 1}
    assert req.computed == 1300


def test_decodes_go_first_and_a_new_prefill_takes_the_leftover_budget():
    engine = Engine(PRESET, max_num_seqs=8, max_num_batched_tokens=64)
    olds = [EngineRequest(f"old{i}", 10, 50) for i in range(4)]
    for r in olds:
        engine.add(r)
    engine.step(0.0)  # 4 prefills of 10 tokens each
    new = EngineRequest("new", prompt_tokens=200, output_tokens=5)
    engine.add(new)
    res = engine.step(engine.clock)
    assert res is not None
    assert all(res.tokens[r.id] == 1 for r in olds)
    assert new.computed == 64 - 4


def test_fcfs_with_one_seat():
    engine = Engine(PRESET, max_num_seqs=1)
    reqs = [EngineRequest(f"r{i}", 50 + 10 * i, 3 + i) for i in range(5)]
    for r in reqs:
        engine.add(r)
    run_to_end(engine)
    starts = [r.started_at for r in reqs]
    finishes = [r.finished_at for r in reqs]
    assert starts == sorted(starts) and finishes == sorted(finishes)
    assert all(r.finished_at <= s for r, s in zip(reqs, starts[1:], strict=False))


def test_max_num_seqs_is_respected():
    engine = Engine(PRESET, max_num_seqs=3)
    for i in range(10):
        engine.add(EngineRequest(f"r{i}", 20, 10 + i))
    now = 0.0
    while (res := engine.step(now)) is not None:
        assert engine.num_running <= 3
        now = res.end
    assert engine.max_running == 3


def test_waiting_requests_are_admitted_in_arrival_order():
    engine = Engine(PRESET, max_num_seqs=2)
    for i in range(4):
        engine.add(EngineRequest(f"r{i}", 20, 5))
    engine.step(0.0)
    assert engine.running_ids == ["r0", "r1"] and engine.waiting_ids == ["r2", "r3"]


def test_kv_exhaustion_preempts_the_latest_admitted_and_it_still_finishes_exactly():
    # 12 blocks of 16 tokens; three requests that each grow to 64 tokens need 12
    # blocks only at the very end, four cannot all fit.
    engine = Engine(PRESET, max_num_seqs=8, kv_capacity_tokens=12 * BLOCK_SIZE)
    reqs = [EngineRequest(f"r{i}", prompt_tokens=20, output_tokens=40) for i in range(4)]
    for r in reqs:
        engine.add(r)
    emitted: dict[str, int] = {}
    preempted: list[str] = []
    now = 0.0
    while (res := engine.step(now, max_steps=7)) is not None:
        for rid, n in res.tokens.items():
            emitted[rid] = emitted.get(rid, 0) + n
        preempted += res.preempted
        check_kv(engine)
        now = res.end
    assert engine.total_preemptions == len(preempted) > 0
    assert preempted[0] == "r3"  # the most recently admitted goes first
    assert all(r.generated == r.output_tokens == emitted[r.id] for r in reqs)
    assert sum(r.preemptions for r in reqs) == len(preempted)
    victim = reqs[3]
    assert victim.finished_at == max(r.finished_at for r in reqs)


def test_preempted_request_reprefills_prompt_and_generated_tokens():
    engine = Engine(PRESET, max_num_seqs=8, max_num_batched_tokens=4096, kv_capacity_tokens=8 * 16)
    a = EngineRequest("a", prompt_tokens=16, output_tokens=60)
    b = EngineRequest("b", prompt_tokens=16, output_tokens=60)
    engine.add(a)
    engine.add(b)
    now = 0.0
    while b.preemptions == 0:
        res = engine.step(now)
        assert res is not None
        now = res.end
    generated = b.generated
    assert b.computed == 0 and engine.waiting_ids == ["b"]
    while b.computed == 0:
        res = engine.step(now)
        assert res is not None
        now = res.end
    # readmitted: one step recomputes prompt + every generated token, then samples one
    assert b.computed == 16 + generated and b.generated == generated + 1
    assert b.first_token_at is not None and b.first_token_at < now


def test_a_request_that_can_never_fit_is_refused():
    engine = Engine(PRESET, kv_capacity_tokens=64)
    with pytest.raises(ValueError, match="exceed the KV cache"):
        engine.add(EngineRequest("big", 60, 10))
    engine.add(EngineRequest("ok", 30, 34))
    with pytest.raises(ValueError, match="already"):
        engine.add(EngineRequest("ok", 30, 34))


def test_abort_frees_kv_and_seats():
    engine = Engine(PRESET, max_num_seqs=1)
    engine.add(EngineRequest("run", 300, 100))
    engine.add(EngineRequest("wait", 30, 10))
    engine.step(0.0)
    assert engine.kv_usage > 0 and engine.running_ids == ["run"]
    assert engine.abort("wait") and engine.waiting_ids == []
    assert engine.abort("run")
    assert engine.kv_usage == 0.0 and engine.idle
    assert not engine.abort("run") and not engine.abort("nope")
    engine.add(EngineRequest("next", 30, 2))
    res = engine.step(engine.clock)
    assert res is not None and engine.running_ids == ["next"]


def test_abort_during_preemption_churn_keeps_kv_consistent():
    engine = Engine(PRESET, max_num_seqs=8, kv_capacity_tokens=10 * 16)
    for i in range(5):
        engine.add(EngineRequest(f"r{i}", 20, 30))
    now = 0.0
    for _ in range(30):
        res = engine.step(now)
        assert res is not None
        now = res.end
        check_kv(engine)
    for rid in engine.running_ids[:1] + engine.waiting_ids[:1]:
        assert engine.abort(rid)
        check_kv(engine)
    run_to_end(engine, now)
    assert engine.kv_usage == 0.0


def test_until_stops_before_a_step_that_would_start_at_or_after_it():
    engine = Engine(PRESET)
    engine.add(EngineRequest("a", 10, 500))
    first = engine.step(0.0)
    assert first is not None
    dt = first.end - first.start
    res = engine.step(first.end, max_steps=1000, until=first.end + 10.5 * dt)
    assert res is not None
    assert res.end >= first.end + 10.5 * dt  # the step started before until runs to completion
    assert res.end - (res.end - res.start) / res.steps < first.end + 10.5 * dt
    assert 10 <= res.steps <= 12


def test_first_step_runs_even_past_until_and_max_steps_bounds_the_call():
    engine = Engine(PRESET)
    engine.add(EngineRequest("a", 10, 500))
    res = engine.step(5.0, max_steps=50, until=1.0)
    assert res is not None and res.steps == 1 and res.start == 5.0
    res = engine.step(res.end, max_steps=50)
    assert res is not None and res.steps == 50
    with pytest.raises(ValueError):
        engine.step(res.end, max_steps=0)


def test_multi_step_stops_on_a_finish():
    engine = Engine(PRESET)
    engine.add(EngineRequest("short", 10, 5))
    engine.add(EngineRequest("long", 10, 50))
    engine.step(0.0)
    res = engine.step(engine.clock, max_steps=1000)
    assert res is not None and res.steps == 4
    assert [r.id for r in res.finished] == ["short"]
    assert res.tokens == {"short": 4, "long": 4}


def test_step_never_starts_before_the_previous_one_ended():
    engine = Engine(PRESET)
    engine.add(EngineRequest("a", 10, 5))
    first = engine.step(0.0)
    assert first is not None
    second = engine.step(0.0)
    assert second is not None and second.start == first.end


def test_engine_rejects_bad_configuration():
    with pytest.raises(ValueError):
        Engine(PRESET, max_num_seqs=0)
    with pytest.raises(ValueError):
        Engine(PRESET, max_num_seqs=512, max_num_batched_tokens=256)
    with pytest.raises(ValueError):
        Engine(PRESET, kv_capacity_tokens=8)
    with pytest.raises(ValueError):
        EngineRequest("x", 0, 5)
