from __future__ import annotations

import json

import numpy as np
import pytest

from saber.bench import Cell, CellResult, RunStats, Sweep, profile_engine, summarize_cells
from saber.bench._summary import cv, summarize_workloads
from saber.bench.cli import main
from saber.config import load_tasks, load_workloads
from saber.engine import get_preset
from saber.speed import fit_model


def stats(goodput: float, ratios: list[float]) -> RunStats:
    return RunStats(goodput, np.array(ratios), {})


def test_summary_picks_best_static_and_averages_seeds():
    cells = [
        CellResult(
            Cell("W1", 5.0, "oracle", seed),
            {
                "static:10": stats(0.2 + seed * 0.1, [1.0, 3.0]),
                "static:20": stats(0.5, [1.0, 1.0]),
                "saber:usl": stats(0.6, [0.5, 1.5]),
            },
        )
        for seed in (0, 1)
    ]
    (row,) = summarize_cells(cells)
    assert row.best_static_b == 20
    assert row.best_static_goodput == pytest.approx(50.0)
    assert row.static[10] == pytest.approx(25.0)
    assert row.saber_goodput == pytest.approx(60.0) and row.diff == pytest.approx(10.0)
    assert row.saber_cv == pytest.approx(0.5)  # ratios 0.5, 1.5 pooled twice
    assert row.static_cv == pytest.approx(0.0)
    (ws,) = summarize_workloads([row])
    assert ws.mean_diff == pytest.approx(10.0) and ws.best_b_counts == {20: 1}


def test_cv_ignores_never_served():
    assert cv(np.array([1.0, 3.0, np.inf])) == pytest.approx(0.5)


def test_offline_profile_is_a_decreasing_curve_usl_fits():
    tasks = load_tasks()
    loads, speeds = profile_engine(
        get_preset("paper"),
        load_workloads(tasks=tasks)["W3"],
        tasks,
        levels=(1, 4, 16, 64),
        points=200,
    )
    assert set(np.unique(loads)) == {1.0, 4.0, 16.0, 64.0}
    means = [speeds[loads == lv].mean() for lv in (1, 4, 16, 64)]
    assert means == sorted(means, reverse=True)
    model = fit_model("usl", loads, speeds)
    for lv, m in zip((1, 4, 16, 64), means, strict=True):
        assert model(lv) == pytest.approx(m, rel=0.1)


def test_quick_sweep_covers_the_paper_grid_shape():
    quick, full = Sweep.quick(), Sweep()
    assert len(full.cells()) == 3 * 12 * 2 * 10 and full.requests == 100
    assert set(quick.workloads) == {"W1", "W2", "W3"} and set(quick.modes) == set(full.modes)


def test_cli_json_rows(capsys, tmp_path):
    code = main(
        [
            "sim", "--workloads", "W2", "--rps", "4", "--batch-sizes", "10,50",
            "--seeds", "1", "--requests", "60", "--jobs", "1", "--format", "json",
            "--no-progress", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["workload"], r["rps"], r["mode"]) for r in rows} == {
        ("W2", 4.0, "oracle"),
        ("W2", 4.0, "realistic"),
    }
    for row in rows:
        for key in (
            "best_static_b", "best_static_goodput", "saber_goodput", "saber_cv", "static_cv",
            "saber_usl_goodput", "saber_linear_goodput", "saber_logistic_goodput",
            "saber_usl_lpq_guard_goodput",
        ):  # fmt: skip
            assert key in row
        assert row["best_static_b"] in (10, 50)
        assert 0 <= row["saber_goodput"] <= 100
    assert (tmp_path / "results.md").read_text().startswith("### oracle mode")
    assert (tmp_path / "fig1_heatmap_oracle.png").stat().st_size > 1000
