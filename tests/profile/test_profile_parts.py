"""The parts of saber-profile on their own: load accounting, saturation, fits, feasibility."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from saber.config import DEFAULT_PROFILE_DIR, TaskType, load_tasks, load_workloads
from saber.profile import (
    InFlight,
    Point,
    PointsFile,
    RequestSpec,
    feasibility,
    fit_speed,
    fit_ttft,
    read_dataset,
    read_points,
)
from saber.profile.report import warnings
from saber.profile.requests import WorkloadSupply
from saber.profile.runner import is_saturated, waiting_allowance
from saber.profile.session import root_url
from saber.profile.stream import Target, payload
from saber.speed import MODELS, ProfileError, USLModel, load_profile
from saber.workload import TraceRequest, write_trace


def test_in_flight_is_time_averaged_over_each_life() -> None:
    meter = InFlight(0.0)
    a = meter.enter(0.0)  # A: alone for 1 s, then with B for 1 s
    b = meter.enter(1.0)  # B: with A for 1 s, alone for 1 s, with C for 1 s
    assert meter.leave(2.0, 0.0, a) == pytest.approx(1.5)
    c = meter.enter(3.0)  # C: with B for 1 s, then alone for 1 s
    assert meter.leave(4.0, 1.0, b) == pytest.approx((2 + 1 + 2) / 3)
    assert meter.leave(5.0, 3.0, c) == pytest.approx(1.5)


@dataclass
class Reading:
    running: float
    waiting: float


def test_saturation_needs_a_pinned_batch_or_a_long_queue() -> None:
    pinned = [Reading(8, 4)] * 5
    assert is_saturated(pinned, level=12, allowance=2)
    assert not is_saturated(pinned[:4], level=12, allowance=2)  # too few reads yet
    assert not is_saturated([*pinned[:4], Reading(11, 1)], level=12, allowance=2)
    # A lagging backend: requests wait, but the running count moves between reads.
    lagging = [Reading(r, 64 - r) for r in (55, 58, 60, 57, 59)]
    assert not is_saturated(lagging, level=64, allowance=3)
    # A KV-limited backend: the running count moves, but a quarter of the load waits.
    kv_bound = [Reading(r, 64 - r) for r in (40, 44, 42, 46, 41)]
    assert is_saturated(kv_bound, level=64, allowance=3)
    # A stalled backend: the same counts on every read, and nothing finishes.
    assert not is_saturated(pinned, level=12, allowance=2, finished=[7, 7, 7, 7, 7])
    assert is_saturated(pinned, level=12, allowance=2, finished=[7, 7, 8, 9, 9])
    assert waiting_allowance(64, 48.0) == 3 and waiting_allowance(4, 300.0) == 2


def points_from(model: USLModel, levels: list[int], n: int, noise: float = 0.02) -> list[Point]:
    rng = np.random.default_rng(3)
    out = []
    for level in levels:
        for _ in range(n):
            tokens = 100
            speed = model.predict(float(level)) * (1 + noise * rng.standard_normal())
            out.append(Point(level, float(level), 50, tokens, tokens, 0.01, tokens / speed, 0.0))
    return out


def test_speed_fit_recovers_usl_and_scores_on_levels_it_left_out() -> None:
    truth = USLModel(lam=120.0, sigma=0.03, kappa=0.0004)
    fits = fit_speed(points_from(truth, [1, 2, 4, 8, 16, 32, 64], 30))
    assert fits.cross_validated and fits.held_out == [2, 4, 8, 16, 32]
    assert fits.best.kind == "usl"
    assert fits.best.r2 > 0.95 and fits.best.mape < 0.03
    assert fits.best.level_r2 > 0.995  # the level means, without the 2% request noise
    assert fits.best.level_error < 0.01
    for load in (3.0, 12.0, 48.0):
        assert fits.best.model.predict(load) == pytest.approx(truth.predict(load), rel=0.03)
    kinds = [r.kind for r in fits.reports]
    assert sorted(kinds) == sorted(MODELS)
    # A fixed split scores the given levels together instead.
    split = fit_speed(points_from(truth, [1, 2, 4, 8, 16], 20), held_out=[4])
    assert split.held_out == [4] and not split.cross_validated


def test_ttft_fit_recovers_a_linear_law() -> None:
    rng = np.random.default_rng(0)
    points = []
    for _ in range(300):
        prompt, load = int(rng.integers(10, 800)), float(rng.integers(1, 33))
        ttft = 0.02 + 3e-5 * prompt + 2e-3 * (load - 1) + 1e-6 * prompt * (load - 1)
        ttft *= 1 + 0.01 * rng.standard_normal()
        points.append(Point(int(load), load, prompt, 10, 10, ttft, 1.0, 0.0))
    fit = fit_ttft(points)
    assert fit is not None and fit.r2 > 0.99 and fit.n == 300
    assert fit.intercept_s == pytest.approx(0.02, rel=0.1)
    assert fit.per_prompt_token_s == pytest.approx(3e-5, rel=0.1)
    assert fit.per_load_s == pytest.approx(2e-3, rel=0.1)
    assert fit.predict(400, 16) == pytest.approx(0.02 + 0.012 + 0.03 + 0.006, rel=0.03)
    assert fit_ttft(points[:5]) is None


def test_ttft_fit_keeps_the_loads_a_gateway_runs_at_despite_a_saturated_tail() -> None:
    # The engine model's shape: tens of milliseconds at every load below saturation,
    # and at the top level one first token in ten waits seconds for a free slot. Fitted
    # in absolute terms those few seconds set the slope, and the fit predicted 3 to 12
    # times the TTFT at loads 12 to 96 (the shipped profile's fit before this test).
    rng = np.random.default_rng(3)
    points = []
    for load in (1, 4, 12, 24, 48, 96, 128):
        for _ in range(60):
            prompt = float(rng.integers(50, 2000))
            ttft = (0.03 + 1e-4 * prompt) * (1 + 0.2 * rng.standard_normal() ** 2)
            if load == 128 and rng.random() < 0.1:
                ttft += 3.0  # queued behind a full batch
            points.append(Point(load, float(load), prompt, 10, 10, ttft, 1.0, 0.0))
    fit = fit_ttft(points)
    assert fit is not None and fit.mape < 0.35
    for load in (4, 24, 96):
        truth = [p.ttft_s for p in points if p.level == load]
        predicted = [fit.predict(p.prompt_tokens, load) for p in points if p.level == load]
        assert np.median(predicted) == pytest.approx(np.median(truth), rel=0.25), load


def test_feasibility_follows_the_gateways_rule() -> None:
    speed = USLModel(lam=100.0, sigma=0.05, kappa=0.0)  # f(L) = 100 / (1 + 0.05 (L-1))
    tasks = {
        name: TaskType(
            name=name, mean_input_tokens=10, mean_output_tokens=out, sla_s=1.0, max_tokens=256
        )
        for name, out in (("easy", 20), ("tight", 50), ("never", 200))
    }
    rows = {r.task: r for r in feasibility(speed, tasks, profiled_max=32)}
    assert rows["easy"].max_load == 32  # f(32) = 39 >= 20 tok/s: still met at the top
    assert rows["tight"].max_load == 21  # f(21) = 50 >= 50 > f(22)
    assert rows["never"].max_load is None and not rows["never"].feasible
    assert rows["never"].best_latency_s == pytest.approx(2.0)
    (line,) = warnings(list(rows.values()))
    assert line.startswith("warning: never's SLA of 1 s can never be met: 200 tokens take 2.00 s")


def test_dataset_accepts_traces_and_minimal_records(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(trace, [TraceRequest("r1", "code_qna", 0.0, 30, 12, 256)])
    (spec,) = [read_dataset(trace).get(0, i) for i in range(1)]
    assert (spec.prompt_tokens, spec.max_tokens, spec.task) == (30, 12, "code_qna")
    assert spec.prompt.startswith("Question about this code:") and len(spec.prompt.split()) == 30
    text = tmp_path / "text.jsonl"
    text.write_text(json.dumps({"prompt": "def f(x): return x", "max_tokens": 9}) + "\n")
    spec = read_dataset(text).get(3, 7)  # cycled: one record serves every request
    assert (spec.prompt, spec.prompt_tokens, spec.max_tokens) == ("def f(x): return x", 4, 9)


def test_workload_requests_differ_per_request_and_per_level() -> None:
    tasks = load_tasks()
    supply = WorkloadSupply(load_workloads(tasks=tasks)["W3"], tasks, seed=0)
    first = [supply.get(0, i) for i in range(200)]
    assert {s.task for s in first} == set(tasks)
    assert len({s.prompt for s in first}) == 200  # no two share a prefix-cacheable prompt
    assert supply.get(0, 5) == first[5]
    assert supply.get(1, 0) != first[0]


def test_points_file_survives_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "p.points.jsonl"
    file = PointsFile.create(path, {"model": "m"})
    point = Point(1, 1.0, 10, 5, 5, 0.01, 0.1, 0.0)
    file.add(point)
    file.close()
    with path.open("a") as fh:
        fh.write('{"type": "point", "lev')
    resumed = PointsFile.resume(path)
    resumed.add(point)
    resumed.close()
    recorded = read_points(path)
    assert recorded.points == [point, point] and recorded.settings == {"model": "m"}


def test_request_body_forces_the_length_and_asks_for_usage() -> None:
    target = Target("http://h:1", "m", "chat", "key")
    body = payload(target, RequestSpec("hi there", 2, 7))
    assert body["max_tokens"] == 7 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "hi there"}]
    assert target.url == "http://h:1/v1/chat/completions"
    assert target.headers == {"authorization": "Bearer key"}
    assert root_url("http://h:1/v1/") == root_url("http://h:1") == "http://h:1"


def test_profile_schema_keeps_old_files_loadable_and_checks_the_new_parts(tmp_path: Path) -> None:
    shipped = json.loads((DEFAULT_PROFILE_DIR / "saber-sim-paper.json").read_text())
    # The shipped profile carries its engine's TTFT fit (issue 48); without it, it is a
    # file from before saber-profile fitted one, which must still load.
    assert "ttft_fit" in shipped and "profiling" not in shipped
    del shipped["ttft_fit"]
    fit = {
        "intercept_s": 0.01,
        "per_prompt_token_s": 1e-5,
        "per_load_s": 1e-3,
        "per_prompt_token_load_s": 0.0,
        "r2": 0.9,
        "mape": 0.1,
        "n": 10,
        "prompt_tokens_max": 500,
        "load_max": 8.0,
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**shipped, "ttft_fit": fit}))
    loaded = load_profile(path).ttft_fit
    assert loaded is not None and loaded.predict(100, 3) == pytest.approx(0.01 + 1e-3 + 2e-3)
    path.write_text(json.dumps({**shipped, "ttft_fit": {**fit, "per_load_s": -1.0}}))
    with pytest.raises(ProfileError, match=r"ttft_fit\.per_load_s"):
        load_profile(path)
