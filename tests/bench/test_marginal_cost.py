"""bench/marginal_cost.py: noting the rule's prices changes nothing that is served, and
the table holds a row per task and one for all of them."""

from __future__ import annotations

import dataclasses

from harness import bench_script
from saber.bench._grid import VLLM_DEFAULT_MAX_NUM_SEQS, shipped_policy, shipped_tasks
from saber.bench._runner import rescore, serve_saber
from saber.bench.matrix.run import fit_engine
from saber.config import load_workloads
from saber.engine import PRESETS
from saber.workload import generate_trace


def test_noting_prices_serves_exactly_as_the_policy_that_weighs_no_cost():
    script = bench_script("marginal_cost")
    preset, tasks, workloads = PRESETS["paper"], shipped_tasks(), load_workloads()
    fit = fit_engine(preset, tasks, workloads, kinds=["usl"], capacity_of=["W1"])
    trace = generate_trace(
        workloads["W1"], tasks, rps=fit.capacity["W1"], n=60, seed=5, mode="realistic"
    )
    ttft = fit.ttft.predict if fit.ttft else None
    met, prices = script.serve(trace, preset, tasks, fit.models["usl"], ttft, 0)

    policy = dataclasses.replace(
        shipped_policy(),
        max_concurrency=VLLM_DEFAULT_MAX_NUM_SEQS,
        future_weight=0.0,
        gain=False,
    )
    plain = serve_saber(
        trace,
        preset,
        tasks,
        fit.models["usl"],
        policy,
        max_num_seqs=VLLM_DEFAULT_MAX_NUM_SEQS,
        ttft=ttft,
        seed=0,
    )
    assert met == {r.id: r.met_sla for r in rescore(plain.records, tasks)}
    # at capacity most requests arrive at a busy engine, and some are priced above 0
    assert len(prices) > len(trace) // 2
    assert all(0.0 <= p.chance <= 1.0 and p.running >= 0 and p.future >= 0 for p in prices.values())
    assert any(p.running + p.future > 0 for p in prices.values())


def test_the_table_has_a_row_per_task_and_one_for_all(capsys):
    script = bench_script("marginal_cost")
    argv = ["--workload", "W1", "--seeds", "2", "--requests", "40", "--every", "4"]
    assert script.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| task")]
    names = [row.strip("|").split("|")[0].strip() for row in rows]
    assert names[-1] == "all" and set(names[:-1]) <= set(shipped_tasks())
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        chance, met = float(cells[2]), float(cells[3])
        running, future, total = float(cells[4]), float(cells[5]), float(cells[6])
        assert 0.0 <= chance <= 1.0 and 0.0 <= met <= 1.0
        assert abs(running + future - total) <= 0.0015
    total_requests = sum(int(row.strip("|").split("|")[1]) for row in rows[:-1])
    assert total_requests == int(rows[-1].strip("|").split("|")[1])
