from __future__ import annotations

import dataclasses
import json
import math

import pytest

from saber.bench import _grid
from saber.bench._engines_file import load_engines
from saber.bench._offline import saturation_rate
from saber.bench._runner import serve_alone, serve_static
from saber.bench.cli import main
from saber.bench.matrix.run import (
    EngineFit,
    Matrix,
    MatrixRun,
    Point,
    PointResult,
    Served,
    sla_scaled,
)
from saber.bench.matrix.summary import summarize_matrix, summary
from saber.config import ConfigError, load_tasks, load_workloads
from saber.engine import get_preset
from saber.scheduler import Policy
from saber.workload import generate_trace

SMALL = Matrix(
    presets=("e",),
    workloads=("W1",),
    grids=("paper",),
    sla_scales=(1.0,),
    rps=(2.0, 8.0),
    batch_sizes=(10, 20),
    variants=("usl",),
    seeds=2,
)


def served(goodput: float, refused: float = 0.0) -> Served:
    return Served(goodput, refused)


def point(rps: float, seed: int, **runs: Served) -> PointResult:
    names = {k.replace("static", "static:").replace("saber_", "saber:"): v for k, v in runs.items()}
    return PointResult(Point("e", "W1", "paper", rps, None, seed), {1.0: names})


def small_run() -> MatrixRun:
    # Per load, goodput of each run on seeds 0 and 1 (shares of requests).
    results = [
        # 2 RPS: B=10 and B=20 tie at 0.9 (the smaller B is best); vLLM 0.8.
        point(2.0, 0, static10=served(0.9), static20=served(1.0), vllm=served(0.8),
              ceiling=served(1.0), saber_default=served(0.95), saber_usl=served(0.9)),
        point(2.0, 1, static10=served(0.9), static20=served(0.8), vllm=served(0.8),
              ceiling=served(1.0), saber_default=served(0.85), saber_usl=served(0.9)),
        # 8 RPS: B=20 is best (0.5); the default refuses 10% and 30%; the ceiling 0.7.
        point(8.0, 0, static10=served(0.3), static20=served(0.5), vllm=served(0.2),
              ceiling=served(0.7), saber_default=served(0.4, 0.1), saber_usl=served(0.6)),
        point(8.0, 1, static10=served(0.3), static20=served(0.5), vllm=served(0.2),
              ceiling=served(0.7), saber_default=served(0.4, 0.3), saber_usl=served(0.6)),
    ]  # fmt: skip
    return MatrixRun(SMALL, {"e": EngineFit("e", {}, None, {"W1": 4.0})}, results)


def test_a_cell_takes_the_best_static_b_per_load_and_the_gaps_over_its_loads():
    (cell,) = summarize_matrix(small_run())
    low, high = cell.loads
    assert (low.rps, low.best_static_b, low.best_static) == (2.0, 10, pytest.approx(90.0))
    assert (high.best_static_b, high.best_static) == (20, pytest.approx(50.0))
    assert low.goodput == pytest.approx(
        {"vllm": 80.0, "ceiling": 100.0, "default": 90.0, "usl": 90.0}
    )
    assert high.refused["default"] == pytest.approx(20.0)  # mean of 10% and 30%
    assert high.refused["best_static"] == 0.0 and high.seeds == 2
    default = cell.gaps["default"]
    assert default.mean_vs_best == pytest.approx((0.0 - 10.0) / 2)
    assert (default.worst_vs_best, default.worst_vs_best_rps) == (pytest.approx(-10.0), 8.0)
    assert default.mean_vs_vllm == pytest.approx((10.0 + 20.0) / 2)
    assert (default.worst_vs_vllm, default.worst_vs_vllm_rps) == (pytest.approx(10.0), 2.0)
    assert [t.gap for t in default.misses()] == ["mean_vs_best", "worst_vs_best"]
    usl = cell.gaps["usl"]
    assert usl.mean_vs_best == pytest.approx(5.0) and usl.misses() == []


def test_each_gap_has_the_standard_error_of_its_per_seed_differences():
    (cell,) = summarize_matrix(small_run())
    low, high = cell.loads
    # Per seed, in seed order; the best static B's goodput is B=10's at 2 RPS, B=20's at 8.
    expected = {"vllm": (80, 80), "best_static": (90, 90), "default": (95, 85), "usl": (90, 90)}
    assert {k: pytest.approx(v) for k, v in expected.items()} == low.by_seed
    assert high.by_seed["best_static"] == pytest.approx((50, 50))
    default = cell.gaps["default"]
    # The mean vs the best static B is -2.5 on seed 0 and -7.5 on seed 1: -5 +- 2.5.
    assert default.mean_vs_best_se == pytest.approx(2.5)
    # At its worst load (8 RPS) it trails by 10 on both seeds: no doubt about that one.
    assert default.worst_vs_best_se == pytest.approx(0.0)
    # vs vLLM alone, its worst load is 2 RPS: +15 and +5.
    assert default.worst_vs_vllm_se == pytest.approx(5.0)
    # -5 + 2 x 2.5 clears -0.5: that miss may be the traces' draw; -10 at 8 RPS is not.
    assert [t.gap for t in default.misses()] == ["mean_vs_best", "worst_vs_best"]
    assert [t.gap for t in default.misses_beyond_noise()] == ["worst_vs_best"]
    # One seed tells no error: every miss counts.
    one = Matrix(**{**dataclasses.asdict(SMALL), "seeds": 1})
    run = small_run()
    first = [r for r in run.results if r.point.seed == 0]
    (alone,) = summarize_matrix(MatrixRun(one, run.fits, first))
    gap = alone.gaps["default"]
    assert math.isnan(gap.worst_vs_best_se)
    assert gap.misses_beyond_noise() == gap.misses() != []


def test_the_summary_counts_cells_that_miss_a_target_and_where_vllm_struggles():
    cells = summarize_matrix(small_run())
    s = summary(cells, SMALL.policies)
    assert s["targets"]["default"] == {
        "mean_vs_best": 1, "worst_vs_best": 1, "worst_vs_vllm": 0, "any": 1, "beyond_noise": 1,
    }  # fmt: skip
    assert s["targets"]["usl"]["any"] == 0
    assert s["worst"]["default"][0]["mean_vs_best"] == pytest.approx(-5.0)
    # vLLM alone is below 80% at 8 RPS only (80.0 at 2 RPS is not below).
    struggles = s["vllm_struggles"]["default"]["W1"]
    assert struggles["cells"] == 1 and struggles["loads_below"] == 1
    assert struggles["gain_where_below"] == pytest.approx(20.0)
    assert struggles["gain_all_loads"] == pytest.approx(15.0)
    assert struggles["room_where_below"] == pytest.approx(50.0)  # ceiling 70 over vLLM's 20


def test_the_ceiling_serves_each_request_alone_and_no_run_meets_a_request_it_misses():
    tasks = sla_scaled(load_tasks(), 0.5)
    w1 = load_workloads(tasks=load_tasks())["W1"]
    preset = get_preset("paper")
    trace = generate_trace(w1, tasks, rps=20, n=60, seed=5, mode="realistic")
    ceiling = serve_alone(trace, preset, tasks)
    assert [r.id for r in ceiling.records] == [r.id for r in trace]
    first = trace[0]
    (alone,) = serve_static([first], preset, 256, tasks).records
    assert ceiling.records[0].e2e == pytest.approx(alone.e2e)
    met_alone = {r.id for r in ceiling.records if r.met_sla}
    for batch in (10, 256):
        crowded = serve_static(trace, preset, batch, tasks)
        assert {r.id for r in crowded.records if r.met_sla} <= met_alone
        assert crowded.goodput() < ceiling.goodput()


def test_a_faster_engine_saturates_at_a_higher_rate():
    tasks = load_tasks()
    w3 = load_workloads(tasks=tasks)["W3"]

    def rate(name: str) -> float:
        return saturation_rate(get_preset(name), w3, tasks, requests=512)

    by_hardware = [rate(f"{hw}-qwen2.5-coder-7b") for hw in ("l4", "a10", "a100-80gb", "h100")]
    assert by_hardware == sorted(by_hardware) and by_hardware[0] < by_hardware[-1] / 5
    by_model = [rate(f"h100-qwen2.5-coder-{size}") for size in ("7b", "3b", "1.5b")]
    assert by_model == sorted(by_model)


def test_capacity_loads_are_multiples_of_the_saturation_rate():
    m = Matrix(presets=("p",), workloads=("W1",), multiples=(0.5, 2.0), rps=(1, 5), seeds=1)
    points = m.points({("p", "W1"): 4.0})
    assert [(p.grid, p.rps, p.multiple) for p in points] == [
        ("paper", 1.0, None), ("paper", 5.0, None), ("capacity", 2.0, 0.5),
        ("capacity", 8.0, 2.0),
    ]  # fmt: skip


GOOD = """
- name: mi300x-qwen2.5-coder-7b
  hardware: {memory_gb: 192, bandwidth_gbs: 5300, tflops: 1307}
  model: qwen2.5-coder-7b
  memory_efficiency: 0.7
  step_overhead_s: 0.002
- name: a10-qwen2.5-coder-14b
  hardware: a10
  model: {n_params: 14.7e9, n_layers: 48, hidden_size: 5120, n_kv_heads: 8, head_dim: 128}
  kv_capacity: 20000
"""


def test_engines_file_defines_presets_from_names_or_specs(tmp_path):
    path = tmp_path / "engines.yaml"
    path.write_text(GOOD)
    engines = load_engines(path)
    mi300, a10 = engines["mi300x-qwen2.5-coder-7b"], engines["a10-qwen2.5-coder-14b"]
    assert mi300.hardware.memory_bandwidth == 5300e9 and mi300.hardware.peak_flops == 1307e12
    assert mi300.model == get_preset("a10-qwen2.5-coder-7b").model
    assert (mi300.memory_efficiency, mi300.step_overhead_s, mi300.mfu) == (0.7, 0.002, 0.5)
    assert a10.hardware == get_preset("a10-qwen2.5-coder-7b").hardware
    assert a10.model.n_layers == 48 and a10.kv_capacity_tokens == 20000
    # Faster memory, the same model: a higher speed.
    assert mi300.decode_speed(1, 500) > get_preset("h100-qwen2.5-coder-7b").decode_speed(1, 500)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: x", "expected a non-empty YAML list of engines"),
        ("- {name: x, hardware: tpu-v9, model: qwen2.5-coder-7b}", "unknown hardware 'tpu-v9'"),
        ("- {name: x, hardware: a10, model: llama-70b}", "unknown model 'llama-70b'"),
        ("- {name: paper, hardware: a10, model: qwen2.5-coder-7b}", "'paper' is already"),
        ("- {name: x, hardware: a10, model: qwen2.5-coder-7b, mfu: 2}", "mfu: Input should be"),
        ("- {name: x, hardware: a10, model: qwen2.5-coder-7b, speed: 3}", "speed: Extra inputs"),
        ("- {name: x, hardware: {memory_gb: 24}, model: qwen2.5-coder-7b}", "bandwidth_gbs"),
        ("- {hardware: a10, model: qwen2.5-coder-7b}", "engine 1: invalid configuration"),
        (
            "- {name: x, hardware: a10, model: qwen2.5-coder-7b}\n"
            "- {name: x, hardware: l4, model: qwen2.5-coder-7b}",
            "engine 2 (x): the name 'x' is already",
        ),
        (
            "- {name: x, hardware: {memory_gb: 16, bandwidth_gbs: 300, tflops: 100},\n"
            "   model: {n_params: 14.7e9, n_layers: 48, hidden_size: 5120, n_kv_heads: 8,"
            " head_dim: 128}}",
            "engine 1 (x): preset x: the model leaves no memory for a KV cache",
        ),
    ],
)
def test_engines_file_errors_name_the_file_the_engine_and_the_problem(tmp_path, text, message):
    path = tmp_path / "engines.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"engines\.yaml") as info:
        load_engines(path)
    assert message in str(info.value)
    with pytest.raises(SystemExit, match=r"engines\.yaml"):
        main(["matrix", "--engines-file", str(path), "--no-progress"])


def test_matrix_cli_writes_results_json_markdown_and_heatmaps(tmp_path, capsys):
    engines = tmp_path / "engines.yaml"
    engines.write_text(GOOD)
    out = tmp_path / "out"
    code = main(
        [
            "matrix", "--engines-file", str(engines), "--presets", "a10-qwen2.5-coder-14b",
            "--workloads", "W3", "--rps", "1",
            "--multiples", "1.5", "--sla-scales", "1", "--seeds", "1", "--batch-sizes", "20,60",
            "--requests", "40", "--jobs", "1", "--no-progress", "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.startswith("## Engine matrix: summary") and "## Cells" in printed
    data = json.loads((out / "results.json").read_text())
    assert data["policies"] == ["default", "usl"]
    rows = data["rows"]
    assert [(r["grid"], r["multiple"]) for r in rows] == [("paper", None), ("capacity", 1.5)]
    capacity = data["engines"]["a10-qwen2.5-coder-14b"]["capacity_rps"]["W3"]
    assert rows[1]["rps"] == pytest.approx(1.5 * capacity) and rows[1]["capacity_rps"] == capacity
    for row in rows:
        assert row["preset"] == "a10-qwen2.5-coder-14b" and row["sla_scale"] == 1.0
        assert row["best_static_b"] in (20, 60) and set(row["static"]) == {"20", "60"}
        for name in ("default", "saber_usl", "vllm", "best_static"):
            assert 0 <= row[f"{name}_goodput"] <= 100 and 0 <= row[f"{name}_refused"] <= 100
            assert row[f"{name}_goodput"] <= row["ceiling_goodput"]
            assert row[f"{name}_goodput_by_seed"] == [pytest.approx(row[f"{name}_goodput"])]
    assert len(data["cells"]) == 2 and "default" in data["cells"][0]
    # One seed tells no error: the gaps' standard errors are unknown (null in JSON).
    gaps = data["cells"][0]["default"]
    assert gaps["seeds"] == 1 and gaps["worst_vs_vllm_se"] is None
    assert set(data["summary"]["targets"]) == {"default", "usl"}
    text = (out / "results.md").read_text()
    assert "## Cells" in text and "## Per load" in text
    assert (out / "matrix_default.png").stat().st_size > 10_000
    assert (out / "matrix_usl.png").exists()


def test_oracle_mode_tells_the_schedulers_the_lengths_and_leaves_the_static_runs(capsys):
    args = ["matrix", "--presets", "paper", "--workloads", "W1", "--grids", "paper"]
    args += ["--rps", "10", "--sla-scales", "1", "--seeds", "1", "--batch-sizes", "30"]
    args += ["--requests", "40", "--jobs", "1", "--no-progress", "--format", "json"]
    rows = {}
    for mode in ("realistic", "oracle"):
        main([*args, "--mode", mode])
        data = json.loads(capsys.readouterr().out)
        assert data["matrix"]["mode"] == mode
        (rows[mode],) = data["rows"]
    real, oracle = rows["realistic"], rows["oracle"]
    for name in ("best_static", "vllm", "ceiling"):
        assert oracle[f"{name}_goodput"] == real[f"{name}_goodput"]
    # The paper's rule admits by max_tokens: the task's cap, or the true length.
    assert oracle["saber_usl_goodput"] != real["saber_usl_goodput"]


def test_matrix_default_is_whatever_the_gateway_ships(capsys, monkeypatch):
    monkeypatch.setattr(_grid, "shipped_policy", lambda: Policy.named("paper", queue_cap=256))
    main(
        [
            "matrix", "--presets", "paper", "--workloads", "W1", "--grids", "paper", "--rps",
            "10", "--sla-scales", "0.5", "--seeds", "1", "--batch-sizes", "30", "--requests",
            "40", "--jobs", "1", "--no-progress", "--format", "json",
        ]
    )  # fmt: skip
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["default_goodput"] == row["saber_usl_goodput"]
