"""The paper's Fig. 1 findings, on the CI-sized grid (``saber-bench sim --quick``)."""

from __future__ import annotations

import dataclasses

from saber.bench import Sweep, run_sweep, summarize_cells
from saber.config import load_tasks, load_workloads
from saber.speed import USLModel


def test_no_single_best_b_and_large_b_collapses_w1_at_high_rps():
    tasks = load_tasks()
    workloads = load_workloads(tasks=tasks)
    sweep = dataclasses.replace(Sweep.quick(), modes=("oracle",), variants=("usl",))
    usl = {"usl": USLModel.from_params(lam=130.0, sigma=0.05, kappa=0.0)}
    rows = {
        (r.workload, r.rps): r
        for r in summarize_cells(run_sweep(sweep, tasks, workloads, usl, progress=False))
    }
    w1 = rows[("W1", 20.0)]
    # Large B collapses W1 at high RPS: B=100 gets well under half the best B's goodput.
    assert w1.best_static_b <= 50
    assert w1.static[100] < 0.5 * w1.best_static_goodput
    # No single B is best across workloads and rates.
    assert len({r.best_static_b for r in rows.values()}) >= 3
    assert rows[("W3", 10.0)].best_static_b > w1.best_static_b
