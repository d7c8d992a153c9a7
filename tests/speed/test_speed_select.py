"""Scores (R^2, MAPE), ranking with fit_all, and fit failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from scipy.optimize import OptimizeResult

from saber.speed import (
    MODELS,
    FitError,
    FitReport,
    LinearModel,
    SoloUSLModel,
    SpeedModel,
    USLModel,
    fit_all,
    fit_model,
    mape,
    r2_score,
)
from saber.speed._select import rank

Points = tuple[np.ndarray, np.ndarray]


def test_scores_of_an_exact_model() -> None:
    model = LinearModel(a=50.0, b=1.0)
    loads = np.array([1.0, 2.0, 3.0, 4.0])
    assert r2_score(model, loads, model.predict(loads)) == 1.0
    assert mape(model, loads, model.predict(loads)) == 0.0


def test_scores_by_hand() -> None:
    model = LinearModel(a=50.0, b=10.0)  # predicts 40, 30 at L = 1, 2
    loads, speeds = [1.0, 2.0], [50.0, 30.0]
    # residuals 10, 0; mean 40 so total = 100 + 100
    assert r2_score(model, loads, speeds) == pytest.approx(1.0 - 100.0 / 200.0)
    assert mape(model, loads, speeds) == pytest.approx((10.0 / 50.0 + 0.0) / 2)


def test_r2_of_constant_speeds() -> None:
    flat = LinearModel(a=40.0, b=0.0)
    assert r2_score(flat, [1.0, 2.0], [40.0, 40.0]) == 1.0
    assert r2_score(flat, [1.0, 2.0], [30.0, 30.0]) == 0.0


def test_scores_reject_bad_points() -> None:
    model = LinearModel(a=50.0, b=1.0)
    with pytest.raises(ValueError, match="speeds must be > 0"):
        mape(model, [1.0], [0.0])
    with pytest.raises(ValueError, match="differ in length"):
        r2_score(model, [1.0, 2.0], [3.0])


def test_fit_all_ranks_usl_first_on_usl_data(
    truths: dict[str, SpeedModel], make_points: Callable[..., Points]
) -> None:
    reports = fit_all(*make_points(truths["usl"], seed=2))
    assert reports[0].kind == "usl"
    assert {r.kind for r in reports} == set(MODELS)
    assert reports[0].r2 > 0.95 and reports[0].mape < 0.06
    assert all(isinstance(r.model, MODELS[r.kind]) for r in reports)


def test_fit_all_picks_the_generating_model(
    truths: dict[str, SpeedModel], make_points: Callable[..., Points]
) -> None:
    reports = fit_all(*make_points(truths["logdecay"], noise=0.02, seed=4))
    assert reports[0].kind in ("logdecay", "usl")  # USL may tie; it never loses by more
    best = max(reports, key=lambda r: r.r2)
    assert best.kind == "logdecay" or reports[0].r2 + 0.005 > best.r2


def test_fit_all_keeps_a_lone_request_that_runs_twice_as_fast(
    make_points: Callable[..., Points],
) -> None:
    """llama.cpp's shape on a CPU (docs/profile.md): USL must miss L=1 or L=2; usl-solo fits."""
    truth = SoloUSLModel(lam=200.0, sigma=0.35, kappa=0.004, solo=400.0)
    points = make_points(truth, levels=(1, 2, 4, 8, 16, 32), n=120, noise=0.03, seed=1)
    reports = fit_all(*points, holdout=0.0)
    assert reports[0].kind == "usl-solo"
    scores = {r.kind: r.r2 for r in reports}
    assert scores["usl-solo"] > 0.98 and scores["usl"] < scores["usl-solo"] - 0.01
    assert reports[0].model.predict(1.0) == pytest.approx(400.0, rel=0.05)


def test_fit_all_is_deterministic_per_seed(
    truths: dict[str, SpeedModel], make_points: Callable[..., Points]
) -> None:
    points = make_points(truths["usl"], seed=6)
    assert [r.r2 for r in fit_all(*points, seed=1)] == [r.r2 for r in fit_all(*points, seed=1)]


@pytest.mark.parametrize("levels", [(1, 8, 32), tuple(range(1, 65))])
@pytest.mark.parametrize("holdout", [0.0, 0.2, 0.5])
def test_fit_all_holdout_modes(
    truths: dict[str, SpeedModel],
    make_points: Callable[..., Points],
    levels: tuple[int, ...],
    holdout: float,
) -> None:
    reports = fit_all(*make_points(truths["usl"], n=300, levels=levels), holdout=holdout)
    assert reports and reports[0].r2 > 0.9


def test_fit_all_rejects_bad_holdout_and_data() -> None:
    with pytest.raises(ValueError, match="holdout"):
        fit_all([1.0, 2.0, 3.0], [3.0, 2.0, 1.0], holdout=1.0)
    with pytest.raises(FitError, match="at least 2 points"):
        fit_all([1.0], [3.0])


def _report(kind: str, r2: float) -> FitReport:
    return FitReport(
        kind, MODELS[kind].fit([1.0, 2.0, 3.0, 4.0], [40.0, 30.0, 24.0, 20.0]), r2, 0.1
    )


@pytest.mark.parametrize(
    ("scores", "first"),
    [
        ({"linear": 0.953, "usl": 0.950}, "usl"),
        ({"linear": 0.960, "usl": 0.950}, "linear"),
        ({"logistic": 0.97, "usl": 0.99, "linear": 0.91}, "usl"),
        ({"logistic": 0.97, "linear": 0.91}, "logistic"),
    ],
)
def test_rank_prefers_usl_on_ties(scores: dict[str, float], first: str) -> None:
    ranked = rank([_report(kind, r2) for kind, r2 in scores.items()])
    assert ranked[0].kind == first


def test_fit_model_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown speed model kind 'amdahl'"):
        fit_model("amdahl", [1.0, 2.0], [2.0, 1.0])


def test_unconverged_fit_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that exhausts its evaluations while the cost still falls is not accepted."""
    costs = iter(np.geomspace(1.0, 1e-3, 20))

    def never_converges(fun: Any, x0: np.ndarray, **kwargs: Any) -> OptimizeResult:
        return OptimizeResult(x=np.asarray(x0), cost=next(costs), status=0, message="budget")

    monkeypatch.setattr("scipy.optimize.least_squares", never_converges)
    with pytest.raises(FitError, match="usl fit did not converge"):
        USLModel.fit([1.0, 2.0, 4.0, 8.0], [50.0, 45.0, 38.0, 30.0])
