"""vLLM's ``--scheduling-policy priority``: the waiting order and the preemption victim."""

from __future__ import annotations

import dataclasses

import pytest
from engine_support import check_kv

from saber.engine import BLOCK_SIZE, Engine, EnginePreset, EngineRequest, StepResult, get_preset

PRESET = get_preset("a10-qwen2.5-coder-3b")  # small steps are memory-bound: context counts
# A starved GPU whose steps are compute-bound: processed tokens and attended pairs count.
COMPUTE_BOUND = dataclasses.replace(PRESET, name="compute-bound", mfu=1e-4)


def step(engine: Engine, now: float) -> StepResult:
    res = engine.step(now)
    assert res is not None
    check_kv(engine)
    return res


def finish(engine: Engine, now: float, emitted: dict[str, int]) -> None:
    """Run single steps to the end, counting each request's tokens."""
    while (res := engine.step(now)) is not None:
        for rid, n in res.tokens.items():
            emitted[rid] = emitted.get(rid, 0) + n
        check_kv(engine)
        now = res.end


def test_waiting_queue_is_ordered_by_priority_then_arrival() -> None:
    engine = Engine(PRESET, max_num_seqs=1, scheduling_policy="priority")
    for rid, priority, arrival in [("c", 2, 0.0), ("a2", 0, 3.0), ("b", 1, 1.0), ("a1", 0, 2.0)]:
        engine.add(EngineRequest(rid, 10, 3, arrival=arrival, priority=priority))
    assert engine.waiting_ids == ["a1", "a2", "b", "c"]
    order: list[str] = []
    now = 0.0
    while (res := engine.step(now)) is not None:
        order += [r.id for r in res.finished]
        now = res.end
    assert order == ["a1", "a2", "b", "c"]  # one seat: admission order is finish order


def test_fcfs_ignores_priority_in_the_waiting_queue() -> None:
    engine = Engine(PRESET, max_num_seqs=1)
    for rid, priority, arrival in [("c", 2, 0.0), ("a2", 0, 3.0), ("b", 1, 1.0)]:
        engine.add(EngineRequest(rid, 10, 3, arrival=arrival, priority=priority))
    assert engine.waiting_ids == ["c", "a2", "b"]


def _unscheduling_case(
    policy: str, priorities: bool = True, preset: EnginePreset = PRESET
) -> tuple[Engine, list[EngineRequest]]:
    """Eight KV blocks, a 16-token budget. After eight steps the batch is, in admission
    order, hi0 and lo (decoding, 1 block each), hi1 (decoding, its 16 tokens fill its
    block) and hi2 (a long prompt, prefilling 13 tokens a step, 5 blocks); no block
    is free, so step 9's hi1 needs one that is not there."""
    engine = Engine(
        preset,
        max_num_seqs=4,
        max_num_batched_tokens=16,
        kv_capacity_tokens=8 * BLOCK_SIZE,
        scheduling_policy=policy,  # type: ignore[arg-type]
    )
    low = 1 if priorities else 0
    hi0 = EngineRequest("hi0", 1, 40, arrival=0.0)
    lo = EngineRequest("lo", 1, 40, arrival=1.0, priority=low)
    hi1 = EngineRequest("hi1", 10, 40, arrival=2.0)
    hi2 = EngineRequest("hi2", 80, 5, arrival=3.0)
    reqs = [hi0, lo, hi1, hi2]
    engine.add(hi0)
    engine.add(lo)
    now = 0.0
    for k in range(8):
        if k == 1:
            engine.add(hi1)
        if k == 3:
            engine.add(hi2)
        res = step(engine, now)
        assert not res.preempted
        now = res.end
    assert engine.running_ids == ["hi0", "lo", "hi1", "hi2"]
    assert [r.computed for r in reqs] == [8, 8, 16, 65] and engine._free == 0
    return engine, reqs


@pytest.mark.parametrize("preset", [PRESET, COMPUTE_BOUND], ids=lambda p: p.name)
def test_priority_preempts_the_lowest_priority_request_even_if_already_scheduled(
    preset: EnginePreset,
) -> None:
    engine, (hi0, lo, hi1, hi2) = _unscheduling_case("priority", preset=preset)
    now = engine.clock
    res = step(engine, now)
    # lo was scheduled before hi1 ran out of KV: it is taken out of the step again
    assert res.preempted == ["lo"]
    assert res.tokens == {"hi0": 1, "hi1": 1}
    assert engine.running_ids == ["hi0", "hi1", "hi2"] and engine.waiting_ids == ["lo"]
    assert lo.computed == 0 and lo.blocks == 0 and lo.generated == 8 and lo.preemptions == 1
    # its budget token came back: hi2's chunk is 16 - 2, not 16 - 3
    assert hi2.computed == 65 + 14
    # and the step is timed without it
    pairs = (8 + 1) + (16 + 1) + 14 * 65 + 14 * 15 // 2
    expected = preset.step_time(num_seqs=3, tokens=16, context_tokens=9 + 17 + 79, attn_pairs=pairs)
    assert res.end - res.start == pytest.approx(expected, rel=1e-9)
    emitted = {r.id: r.generated for r in (hi0, lo, hi1, hi2)}
    finish(engine, res.end, emitted)
    assert engine.idle
    for r in (hi0, lo, hi1, hi2):
        assert r.generated == r.output_tokens == emitted[r.id] and r.finished_at is not None
    # the two earliest high-priority requests are never the victim
    assert hi0.preemptions == hi1.preemptions == 0


def test_fcfs_preempts_the_latest_admitted_and_priorities_change_nothing() -> None:
    engine, reqs = _unscheduling_case("fcfs")
    res = step(engine, engine.clock)
    assert res.preempted == ["hi2"]
    assert res.tokens == {"hi0": 1, "lo": 1, "hi1": 1}
    finish(engine, res.end, {})
    plain, plain_reqs = _unscheduling_case("fcfs", priorities=False)
    finish(plain, plain.clock, {})
    for a, b in zip(reqs, plain_reqs, strict=True):
        assert a.generated == a.output_tokens
        assert (a.first_token_at, a.finished_at, a.preemptions) == (
            b.first_token_at,
            b.finished_at,
            b.preemptions,
        )


@pytest.mark.parametrize(("policy", "victim"), [("priority", "lo"), ("fcfs", "hiB")])
def test_victim_not_yet_scheduled_in_the_step(policy: str, victim: str) -> None:
    # Three blocks; hiA's first decode past 16 tokens needs a fourth. Under priority
    # the victim (lo) sits after hiA in the batch, so nothing is un-scheduled.
    engine = Engine(
        PRESET,
        max_num_seqs=4,
        kv_capacity_tokens=3 * BLOCK_SIZE,
        scheduling_policy=policy,  # type: ignore[arg-type]
    )
    engine.add(EngineRequest("hiA", 15, 20, arrival=0.0))
    engine.add(EngineRequest("lo", 8, 20, arrival=1.0, priority=1))
    now = step(engine, 0.0).end
    engine.add(EngineRequest("hiB", 8, 20, arrival=2.0))
    now = step(engine, now).end
    assert engine.running_ids == ["hiA", "lo", "hiB"] and engine._free == 0
    res = step(engine, now)
    assert res.preempted == [victim]
    assert set(res.tokens) == {"hiA", "lo", "hiB"} - {victim}
    emitted: dict[str, int] = {}
    finish(engine, res.end, emitted)
    assert engine.idle and engine.total_preemptions >= 1


def test_a_preempted_request_rejoins_the_waiting_queue_in_priority_order() -> None:
    engine, _ = _unscheduling_case("priority")
    engine.add(EngineRequest("late_hi", 5, 5, arrival=9.0))
    engine.add(EngineRequest("early_lo", 5, 5, arrival=0.5, priority=1))
    engine.add(EngineRequest("later_lo", 5, 5, arrival=9.0, priority=1))
    res = step(engine, engine.clock)
    assert res.preempted == ["lo"]
    # not the front: after the high-priority request, between the low ones by arrival
    assert engine.waiting_ids == ["late_hi", "early_lo", "lo", "later_lo"]


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="scheduling_policy"):
        Engine(PRESET, scheduling_policy="lifo")  # type: ignore[arg-type]
