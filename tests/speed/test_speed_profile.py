"""Profile files: build, save, load, and clear errors for malformed ones."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from saber.speed import (
    Profile,
    ProfiledBackend,
    ProfileError,
    SpeedModel,
    build_profile,
    fit_model,
    load_profile,
    save_profile,
    summarize_points,
)

Points = tuple[np.ndarray, np.ndarray]


@pytest.fixture
def profile(truths: dict[str, SpeedModel], make_points: Callable[..., Points]) -> Profile:
    loads, speeds = make_points(truths["usl"], n=200, levels=(1, 2, 4, 8, 16, 32))
    return build_profile(
        fit_model("usl", loads, speeds),
        loads,
        speeds,
        backend=ProfiledBackend(kind="vllm", url="http://localhost:8000", version="0.6.3"),
        model_name="Qwen/Qwen2.5-Coder-7B-Instruct",
        notes="synthetic",
    )


def test_build_profile_scores_and_summarises(profile: Profile) -> None:
    assert profile.kind == "usl" and profile.version == 1
    assert profile.r2 > 0.9 and 0.0 <= profile.mape < 0.1
    assert profile.created_at.tzinfo is not None
    points = profile.points
    assert points.count == 200 and (points.load_min, points.load_max) == (1.0, 32.0)
    assert [row.load for row in points.levels] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert sum(row.n for row in points.levels) == 200
    assert all(row.p10 <= row.mean_speed <= row.p90 for row in points.levels)
    assert profile.samples is not None and len(profile.samples) == 200


def test_time_averaged_loads_summarise_by_the_level_held() -> None:
    """saber-profile's loads are time averages just under the level held (1.9995 at 2):
    the summary has one row per level, not one per equal-count bin."""
    rng = np.random.default_rng(0)
    levels = np.repeat([1.0, 2.0, 4.0, 8.0, 16.0, 32.0], 20)
    loads = np.maximum(levels * (1.0 - rng.uniform(0.0, 0.001, levels.size)), 1.0)
    speeds = 400.0 / levels * rng.uniform(0.95, 1.05, levels.size)
    summary = summarize_points(loads, speeds)
    assert [row.n for row in summary.levels] == [20] * 6
    assert [round(row.load) for row in summary.levels] == [1, 2, 4, 8, 16, 32]


def test_round_trip(profile: Profile, tmp_path: Path) -> None:
    path = tmp_path / "profiles" / "vllm.json"
    save_profile(profile, path)
    raw = json.loads(path.read_text())
    assert {"r2", "mape", "params", "points", "backend", "model", "created_at"} <= set(raw)
    loaded = load_profile(path)
    assert loaded == profile
    assert loaded.speed_model() == fit_model("usl", *np.array(profile.samples).T)
    assert loaded.speed_model().predict(10.0) == profile.speed_model().predict(10.0)


def test_optional_parts(truths: dict[str, SpeedModel], tmp_path: Path) -> None:
    loads = np.repeat(np.arange(1.0, 201.0), 2)  # 200 distinct loads: summarised in 64 bins
    speeds = truths["linear"].predict(np.minimum(loads, 60.0))
    built = build_profile(
        fit_model("linear", loads, speeds),
        loads,
        speeds,
        backend="sim",
        model_name="m",
        keep_samples=False,
    )
    assert built.samples is None and built.backend.kind == "sim"
    assert len(built.points.levels) == 64 and built.points.count == 400
    save_profile(built, tmp_path / "p.json")
    assert "samples" not in json.loads((tmp_path / "p.json").read_text())
    assert load_profile(tmp_path / "p.json") == built


def _valid() -> dict[str, Any]:
    return {
        "version": 1,
        "kind": "usl",
        "params": {"lam": 60.0, "sigma": 0.02, "kappa": 0.0005},
        "r2": 0.99,
        "mape": 0.04,
        "points": {
            "count": 2,
            "load_min": 1.0,
            "load_max": 8.0,
            "levels": [
                {"load": 1.0, "n": 1, "mean_speed": 60.0, "p10": 60.0, "p90": 60.0},
                {"load": 8.0, "n": 1, "mean_speed": 50.0, "p10": 50.0, "p90": 50.0},
            ],
        },
        "samples": [[1.0, 60.0], [8.0, 50.0]],
        "backend": {"kind": "vllm", "url": None, "version": None},
        "model": {"name": "qwen", "gpu": "L4"},
        "created_at": "2025-01-01T00:00:00+00:00",
    }


def _with(path: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    """Set (or, with ..., delete) a dotted path such as params.sigma in the valid profile."""

    def mutate(doc: dict[str, Any]) -> dict[str, Any]:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        if value is ...:
            del node[key]
        else:
            node[key] = value
        return doc

    return mutate


MALFORMED: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "sigma above 1": (_with("params.sigma", 1.5), "params.sigma: must be between 0 and 1"),
    "lam zero": (_with("params.lam", 0.0), "params.lam: must be > 0"),
    "param missing": (_with("params.kappa", ...), "params.kappa: is missing"),
    "param of another kind": (_with("params.b", 1.0), "params.b: is not a usl parameter"),
    "param not a number": (_with("params.sigma", "low"), "params.sigma"),
    "unknown kind": (_with("kind", "amdahl"), "kind: unknown speed model kind 'amdahl'"),
    "kind missing": (_with("kind", ...), "kind: Field required"),
    "r2 missing": (_with("r2", ...), "r2: Field required"),
    "r2 above 1": (_with("r2", 1.2), "r2: Input should be less than or equal to 1"),
    "negative mape": (_with("mape", -0.1), "mape: Input should be greater than or equal to 0"),
    "naive timestamp": (_with("created_at", "2025-01-01T00:00:00"), "created_at"),
    "bad timestamp": (_with("created_at", "yesterday"), "created_at"),
    "level row incomplete": (_with("points.levels.0.p10", ...), "points.levels.0.p10"),
    "backend kind missing": (_with("backend.kind", ...), "backend.kind: Field required"),
    "model name missing": (_with("model.name", ...), "model.name: Field required"),
    "sample load below 1": (_with("samples.0.0", 0.0), "samples.0.0"),
    "future version": (_with("version", 2), "version"),
    "unknown field": (_with("speed", 3), "speed: Extra inputs are not permitted"),
    "top level list": (lambda doc: [doc], "expected a JSON object, got list"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_profile_is_rejected(case: str, tmp_path: Path) -> None:
    mutate, message = MALFORMED[case]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(mutate(_valid())))
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert str(path) in str(caught.value)
    assert message in str(caught.value)


def test_valid_fixture_loads(tmp_path: Path) -> None:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(_valid()))
    assert load_profile(path).speed_model().params["sigma"] == 0.02


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read profile"), ("{not json", "not valid JSON"), ("", "not valid JSON")],
)
def test_unreadable_profile(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ProfileError, match=message) as caught:
        load_profile(path)
    assert str(path) in str(caught.value)
    assert isinstance(caught.value, ValueError)
