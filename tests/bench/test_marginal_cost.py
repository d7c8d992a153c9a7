"""bench/marginal_cost.py: noting the rule's prices changes nothing that is served, a
request named to be admitted on arrival is, and the tables hold a row per task and
one for all of them."""

from __future__ import annotations

import dataclasses

import pytest

from harness import bench_script
from saber.bench._grid import VLLM_DEFAULT_MAX_NUM_SEQS, shipped_policy, shipped_tasks
from saber.bench._runner import rescore, serve_saber
from saber.bench.matrix.run import fit_engine
from saber.config import load_workloads
from saber.engine import PRESETS
from saber.workload import generate_trace


@pytest.fixture(scope="module")
def paper_at_capacity():
    """The script's set-up on the paper's engine, and a W1 trace at its capacity."""
    script = bench_script("marginal_cost")
    preset, tasks, workloads = PRESETS["paper"], shipped_tasks(), load_workloads()
    fit = fit_engine(preset, tasks, workloads, kinds=["usl"], capacity_of=["W1"])
    trace = generate_trace(
        workloads["W1"], tasks, rps=fit.capacity["W1"], n=60, seed=5, mode="realistic"
    )
    ttft = fit.ttft.predict if fit.ttft else None
    return script.Setup(preset, tasks, fit.models["usl"], ttft), trace


@pytest.mark.parametrize("weigh", [False, True])
def test_noting_prices_serves_exactly_as_the_policy_does(paper_at_capacity, weigh):
    setup, trace = paper_at_capacity
    served = setup.serve(trace, 0, weigh=weigh)
    policy = dataclasses.replace(shipped_policy(), max_concurrency=VLLM_DEFAULT_MAX_NUM_SEQS)
    if not weigh:
        policy = dataclasses.replace(policy, future_weight=0.0, gain=False)
    plain = serve_saber(
        trace,
        setup.preset,
        setup.tasks,
        setup.speed,
        policy,
        max_num_seqs=VLLM_DEFAULT_MAX_NUM_SEQS,
        ttft=setup.ttft,
        seed=0,
    )
    assert served.met == {r.id: r.met_sla for r in rescore(plain.records, setup.tasks)}
    # at capacity most requests arrive at a busy engine, and some are priced above 0
    assert len(served.prices) > len(trace) // 2
    prices = served.prices.values()
    assert all(0.0 <= p.chance <= 1.0 and p.running >= 0 and p.future >= 0 for p in prices)
    assert any(p.running + p.future > 0 for p in prices)
    if weigh:
        assert served.held, "the shipped policy holds none at the paper engine's capacity"
        assert all(served.waited[x] > 0 for x in served.held)
    else:  # it admits as vLLM alone would
        assert not served.held and all(w == 0 for w in served.waited.values())


def test_a_request_named_to_be_admitted_on_arrival_is(paper_at_capacity):
    setup, trace = paper_at_capacity
    held = setup.serve(trace, 0, weigh=True).held
    x = sorted(held)[0]
    served = setup.serve(trace, 0, weigh=True, admit=x)
    assert served.waited[x] == 0 and x not in served.demoted


def test_the_tables_have_a_row_per_task_and_one_for_all(capsys):
    script = bench_script("marginal_cost")
    argv = ["--workload", "W1", "--seeds", "2", "--requests", "40", "--every", "4"]
    assert script.main(argv) == 0
    out = capsys.readouterr().out
    first, second = out.split("What each hold")
    for table, columns in ((first, 8), (second, 7)):
        lines = table.splitlines()
        rows = [line for line in lines if line.startswith("| ") and not line.startswith("| task")]
        cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
        assert [c[0] for c in cells][-1] == "all"
        assert {c[0] for c in cells[:-1]} <= set(shipped_tasks())
        assert all(len(c) == columns for c in cells)
        assert sum(int(c[1]) for c in cells[:-1]) == int(cells[-1][1])
        for c in cells:
            assert 0.0 <= float(c[2]) <= 1.0  # the chance at arrival
    for c in (row.strip("|").split("|") for row in first.splitlines() if row.startswith("| c")):
        running, future, total = (float(v) for v in c[4:7])
        assert abs(running + future - total) <= 0.0015
