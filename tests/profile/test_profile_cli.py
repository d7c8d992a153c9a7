"""saber-profile end to end on saber-sim: the profile, the PNG, the report, the gateway."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from profile_support import run_cli

from saber.config import load_gateway_config
from saber.gateway import settings_from_config, start_in_thread
from saber.profile import points_path, read_points
from saber.sim.http import RunningSim
from saber.speed import load_profile

PNG = b"\x89PNG\r\n\x1a\n"


def test_profile_written_loaded_and_used_by_the_gateway(
    fast_sim: RunningSim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "profiles" / "sim.json"
    plot = tmp_path / "sim.png"
    code, report, err = run_cli(
        [
            "--base-url", fast_sim.api_url, "--model", fast_sim.model, "--workload", "W2",
            "--levels", "1,2,4,8", "--requests-per-level", "8", "--out", str(out),
            "--plot", str(plot),
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert "backend: sim" in err
    assert "load 8 (round 1): 4 points" in err and "load 8 (round 2): 4 points" in err

    profile = load_profile(out)
    assert profile.backend.kind == "sim" and profile.backend.url == fast_sim.api_url
    assert profile.model.name == fast_sim.model
    assert profile.samples is not None
    assert profile.profiling is not None
    assert profile.profiling.source == "workload W2"
    assert profile.profiling.levels == [1, 2, 4, 8]
    assert profile.profiling.held_out_levels == [2, 4]
    assert {fit.kind for fit in profile.profiling.fits} >= {"usl", "linear"}
    assert profile.kind == profile.profiling.fits[0].kind
    assert profile.profiling.fits[0].level_r2 is not None
    assert profile.ttft_fit is not None
    assert profile.speed_model().predict(1.0) > profile.speed_model().predict(8.0)
    assert plot.read_bytes().startswith(PNG)

    # The points file holds the run, every request (warm-up flagged) and each level's end.
    recorded = read_points(points_path(out))
    assert recorded.settings["model"] == fast_sim.model
    # Two rounds of 4 points a level. A level whose rounds disagree (a busy machine) is
    # visited again and says so; its outlying rounds are left out of the fit.
    visits = {(p.level, p.round) for p in recorded.points}
    assert {r for _, r in visits} >= {0, 1}
    fitted = len(recorded.fit_points())
    assert profile.points.count == fitted and profile.ttft_fit.n == fitted
    if {r for _, r in visits} == {0, 1}:
        assert [recorded.measured(level) for level in (1, 2, 4, 8)] == [8, 8, 8, 8]
        assert fitted == 32 and not recorded.dropped
    else:
        assert "rounds disagree" in err
        assert all(recorded.measured(level) >= 8 for level in (1, 2, 4, 8))
    # The first L requests of each visit to a level are warm-up (a long one may be cut off
    # by the end).
    assert 8 <= sum(p.warmup for p in recorded.points) <= sum(level for level, _ in visits)
    assert sorted(recorded.ended) == [1, 2, 4, 8]
    assert all(p.output_tokens == p.max_tokens for p in recorded.points)

    # The report: every model scored, and every task type of configs/tasks.yaml judged.
    assert "leave-one-level-out" in report
    for name in ("usl", "logistic", "code_qna", "code_translation", "TTFT(P, L)"):
        assert name in report

    cfg = load_gateway_config(env={}, overrides={"backend.url": fast_sim.url, "profile": str(out)})
    gw = start_in_thread(settings_from_config(cfg))
    try:
        status = httpx.get(gw.url + "/saber/status").json()["profile"]
    finally:
        gw.stop()
    assert status["path"] == str(out) and status["default"] is False
    assert status["kind"] == profile.kind and status["params"] == profile.params


def test_chat_endpoint_and_default_output_name(
    fast_sim: RunningSim,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    dataset: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(
        [
            "--base-url", fast_sim.url, "--model", fast_sim.model, "--endpoint", "chat",
            "--dataset", str(dataset), "--levels", "1,3", "--requests-per-level", "4",
            "--no-plot",
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    out = tmp_path / "profiles" / f"{fast_sim.model}.json"
    profile = load_profile(out)
    assert profile.profiling is not None and profile.profiling.endpoint == "chat"
    # Two levels: too few to leave one out, so the scores are in-sample.
    assert profile.profiling.held_out_levels == []
    assert not out.with_suffix(".png").exists()
    # A chat prompt carries the template's tokens on top of the dataset's words.
    points = read_points(points_path(out)).points
    prompts = {json.loads(line)["prompt_tokens"] for line in dataset.read_text().splitlines()}
    assert all(p.prompt_tokens > min(prompts) for p in points)
