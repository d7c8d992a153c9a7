from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from saber.bench import Cell, CellResult, RunStats, Sweep, _grid, profile_engine, summarize_cells
from saber.bench._grid import VARIANTS, parse_variant
from saber.bench._runner import summarize
from saber.bench._summary import cv, summarize_workloads
from saber.bench.cli import main
from saber.config import load_tasks, load_workloads
from saber.engine import get_preset
from saber.scheduler import Policy
from saber.sim import SimRecord, SimResult
from saber.speed import fit_model
from saber.workload import generate_trace


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
            "saber_usl_mean_goodput", "saber_usl_unprotected_goodput",
            "saber_usl_mean_ratio_mean", "saber_usl_closed-loop_goodput",
        ):  # fmt: skip
            assert key in row
        assert row["best_static_b"] in (10, 50)
        assert 0 <= row["saber_goodput"] <= 100
    text = (tmp_path / "results.md").read_text()
    assert text.startswith("### oracle mode")
    # Every variant is summarized against the best static B, faithful SABER first.
    table = text[text.index("SABER variants against the best static B") :]
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| usl")]
    assert rows[:3] == ["| usl", "| usl+closed-loop", "| usl+mean"] and "| usl+unprotected" in rows
    assert (tmp_path / "fig1_heatmap_oracle.png").stat().st_size > 1000


def test_variants_report_the_faithful_algorithm_and_each_option():
    assert VARIANTS[0] == "usl" and {"usl+mean", "usl+closed-loop"} <= set(VARIANTS)
    assert parse_variant("usl") == ("usl", {})
    assert parse_variant("usl+unprotected+lpq_idle") == (
        "usl",
        {"protection": "none", "lpq": "idle"},
    )
    assert parse_variant("usl+closed-loop+no_future")[1]["future_weight"] == 0.0
    kind, fields = parse_variant("usl+closed-loop+frozen")
    assert kind == "usl" and fields["protection"] == "frozen" and fields["calibrate"] is True
    assert "max_concurrency" not in fields
    with pytest.raises(ValueError, match="unknown option"):
        parse_variant("usl+telepathy")


def test_summary_per_variant_uses_that_variants_goodput():
    cells = [
        CellResult(
            Cell("W1", rps, "oracle", 0),
            {
                "static:10": stats(0.5, [1.0]),
                "saber:usl": stats(0.4, [1.0, 2.0]),
                "saber:usl+mean": stats(0.7, [1.0, 1.0]),
            },
        )
        for rps in (2.0, 5.0)
    ]
    rows = summarize_cells(cells)
    (faithful,) = summarize_workloads(rows)
    (value,) = summarize_workloads(rows, "usl+mean")
    assert faithful.min_diff_rps_ge_5 == pytest.approx(-10.0)
    assert value.variant == "usl+mean" and value.mean_diff == pytest.approx(20.0)
    assert rows[0].variant_ratio_mean["usl+mean"] == pytest.approx(1.0)


def test_held_out_seeds_give_other_traces(capsys):
    def goodput(seed_base: int) -> float:
        main(
            [
                "sim", "--workloads", "W3", "--rps", "10", "--batch-sizes", "50",
                "--modes", "oracle", "--variants", "usl", "--seeds", "1", "--requests", "40",
                "--jobs", "1", "--format", "json", "--no-progress", "--seed-base", str(seed_base),
            ]
        )  # fmt: skip
        (row,) = json.loads(capsys.readouterr().out)
        return row["static"]["50"]

    assert goodput(1000) == goodput(1000) != goodput(5000)


def test_scenarios_compare_the_default_with_static_b_and_vllm_default(capsys, tmp_path):
    code = main(
        [
            "scenarios", "--scenarios", "step-W3", "--seeds", "1", "--batch-sizes", "20,60",
            "--format", "json", "--no-progress", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads(capsys.readouterr().out)  # nothing but JSON on stdout
    step = data["step-W3"]
    assert step["phases"] == ["low", "burst", "recovery"]
    names = [r["contender"] for r in step["runs"]]
    assert names == ["static B=20", "static B=60", "vLLM default (256)", "paper", "default"]
    assert all(len(r["phases"]) == 3 and 0 <= r["goodput"] <= 100 for r in step["runs"])
    s = step["summary"]
    assert s["best_static"] in ("static B=20", "static B=60")
    # The recovery after the burst is what the default is for.
    assert s["default_minus_best_static"] > 10 and s["worst_phase_minus_vllm_default"] > -1
    assert (tmp_path / "scenarios.md").read_text().startswith("#### step-W3")


def test_sim_json_is_only_json_on_stdout(capsys):
    main(
        [
            "sim", "--workloads", "W3", "--rps", "5", "--batch-sizes", "50", "--modes",
            "realistic", "--variants", "usl", "--seeds", "1", "--requests", "30", "--jobs", "1",
            "--format", "json",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    json.loads(out)  # the progress bar went to stderr


def test_sim_json_carries_the_shipped_default_and_each_variants_refusals(capsys, monkeypatch):
    # "default" is whatever configs/gateway.yaml ships: here made the paper's rule.
    monkeypatch.setattr(_grid, "shipped_policy", lambda: Policy.named("paper", queue_cap=256))
    main(
        [
            "sim", "--workloads", "W1", "--rps", "15", "--batch-sizes", "30", "--modes",
            "realistic", "--variants", "usl,usl+closed-loop,default", "--seeds", "1",
            "--requests", "40", "--jobs", "1", "--format", "json", "--no-progress",
        ]
    )  # fmt: skip
    (row,) = json.loads(capsys.readouterr().out)
    for name in ("default", "saber_usl", "saber_usl_closed-loop"):
        assert 0 <= row[f"{name}_goodput"] <= 100 and 0 <= row[f"{name}_refused"] <= 100
    assert "saber_default_goodput" not in row  # named once, whatever --variants says
    assert row["default_goodput"] == row["saber_usl_goodput"]
    assert row["default_refused"] == row["saber_usl_refused"]


def test_refused_counts_rejected_and_still_waiting():
    tasks = load_tasks()
    trace = generate_trace(load_workloads(tasks=tasks)["W2"], tasks, rps=5, n=10, seed=1)
    records = [
        SimRecord(r.id, r.task, r.arrival, 1.0, None, None, None, None, 0, 0, False, i < 2)
        for i, r in enumerate(trace)
    ]
    result = SimResult(records, unfinished=[trace[5].id])
    assert summarize(result).refused == pytest.approx(0.3)


def test_a_variant_that_serves_nothing_prints_no_numpy_warnings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """saber-bench sim printed numpy's "Mean of empty slice" when a SABER variant served
    no request of a point: its ratios are then all infinite. Now it shows "-"."""
    from saber.bench import cli

    real = cli.run_sweep

    def starving(*args: Any, **kwargs: Any) -> list[CellResult]:
        results = real(*args, **kwargs)
        for res in results:
            nothing = RunStats(0.0, np.full_like(res.runs["saber:usl"].ratios, np.inf), {})
            res.runs["saber:usl"] = nothing
        return results

    monkeypatch.setattr(cli, "run_sweep", starving)
    argv = ["sim", "--quick", "--workloads", "W1", "--rps", "5", "--seeds", "1"]
    argv += ["--requests", "20", "--jobs", "1", "--no-progress", "--out", str(tmp_path)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(argv) == 0
    out = capsys.readouterr()
    assert "Warning" not in out.err and "empty slice" not in out.err
    row = json.loads((tmp_path / "results.json").read_text())[0]
    assert row["saber_usl_goodput"] == 0 and row["saber_usl_ratio_mean"] is None
