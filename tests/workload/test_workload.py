from __future__ import annotations

import numpy as np
import pytest

from saber.config import load_tasks, load_workloads
from saber.workload import (
    count_chat_tokens,
    count_tokens,
    gamma_arrivals,
    generate_trace,
    guess_task,
    make_prompt,
    poisson_arrivals,
    read_trace,
    write_trace,
)

TASKS = load_tasks()
WORKLOADS = load_workloads(tasks=TASKS)


def test_lengths_center_on_table_one_means():
    trace = generate_trace(WORKLOADS["W3"], TASKS, rps=10, n=8000, seed=1)
    for name, task in TASKS.items():
        outs = [r.output_tokens for r in trace if r.task == name]
        ins = [r.prompt_tokens for r in trace if r.task == name]
        assert np.mean(outs) == pytest.approx(task.mean_output_tokens, rel=0.06)
        assert np.mean(ins) == pytest.approx(task.mean_input_tokens, rel=0.06)
        assert max(outs) <= task.max_tokens and min(outs) >= 1


def test_mix_shares_follow_the_workload():
    trace = generate_trace(WORKLOADS["W1"], TASKS, rps=10, n=10000, seed=2)
    share = sum(r.task == "code_translation" for r in trace) / len(trace)
    assert share == pytest.approx(0.4, abs=0.02)


def test_poisson_rate_and_gamma_burstiness():
    rng = np.random.default_rng(0)
    gaps = np.diff(poisson_arrivals(rng, 5.0, 20000))
    assert 1 / gaps.mean() == pytest.approx(5.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)
    gaps = np.diff(gamma_arrivals(rng, 5.0, 20000, cv=3.0))
    assert 1 / gaps.mean() == pytest.approx(5.0, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.15)


def test_modes_share_arrivals_and_true_lengths():
    oracle = generate_trace(WORKLOADS["W3"], TASKS, rps=4, n=200, seed=7, mode="oracle")
    real = generate_trace(WORKLOADS["W3"], TASKS, rps=4, n=200, seed=7, mode="realistic")
    for a, b in zip(oracle, real, strict=True):
        assert (a.arrival, a.task, a.output_tokens) == (b.arrival, b.task, b.output_tokens)
        assert a.max_tokens == a.output_tokens
        assert b.max_tokens == TASKS[b.task].max_tokens


def test_seed_determinism():
    a = generate_trace(WORKLOADS["W2"], TASKS, rps=3, n=50, seed=11)
    b = generate_trace(WORKLOADS["W2"], TASKS, rps=3, n=50, seed=11)
    c = generate_trace(WORKLOADS["W2"], TASKS, rps=3, n=50, seed=12)
    assert a == b and a != c


def test_trace_round_trip(tmp_path):
    trace = generate_trace(WORKLOADS["W3"], TASKS, rps=2, n=30, seed=3, mode="realistic")
    path = tmp_path / "t.jsonl"
    write_trace(path, trace)
    assert read_trace(path) == trace


def test_bad_trace_line_is_located(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a"}\n')
    with pytest.raises(ValueError, match=r"t.jsonl:1"):
        read_trace(path)


def test_prompts_have_exact_token_counts_and_task_markers():
    for task in TASKS:
        text = make_prompt(task, 120, offset=5)
        assert count_tokens(text) == 120
        assert guess_task(text) == task
    assert guess_task("hello world") is None
    assert count_chat_tokens([{"role": "user", "content": "a b c"}]) == 3 + 4


def test_a_phased_trace_changes_rate_at_each_phase():
    from saber.workload import generate_phased_trace

    phases = ((100.0, 2.0), (20.0, 20.0), (100.0, 4.0))
    trace = generate_phased_trace(WORKLOADS["W3"], TASKS, phases=phases, seed=3)
    assert [r.arrival for r in trace] == sorted(r.arrival for r in trace)
    assert len({r.id for r in trace}) == len(trace)
    counts = [
        sum(start <= r.arrival < start + d for r in trace)
        for start, d in ((0.0, 100.0), (100.0, 20.0), (120.0, 100.0))
    ]
    assert 150 <= counts[0] <= 250 and 300 <= counts[1] <= 500 and 300 <= counts[2] <= 500
    assert all(r.max_tokens == TASKS[r.task].max_tokens for r in trace)  # realistic mode
    again = generate_phased_trace(WORKLOADS["W3"], TASKS, phases=phases, seed=3)
    assert again == trace
