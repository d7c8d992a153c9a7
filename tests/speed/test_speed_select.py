"""Scores (R^2, MAPE), model selection with select_model, and fit failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from scipy.optimize import OptimizeResult

from saber.speed import (
    MODELS,
    TIE,
    FitError,
    FitReport,
    LinearModel,
    SoloUSLModel,
    SpeedModel,
    USLModel,
    fit_model,
    interior_levels,
    mape,
    mean_abs_pct_error,
    r2_score,
    r_squared,
    select_model,
)
from saber.speed._select import _ranked

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
    assert r_squared([50.0, 30.0], [40.0, 30.0]) == r2_score(model, loads, speeds)
    assert mean_abs_pct_error([50.0, 30.0], [40.0, 30.0]) == mape(model, loads, speeds)


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


PROFILE_LEVELS = (1, 2, 4, 8, 16, 32, 64)


def test_select_keeps_usl_on_usl_data(
    truths: dict[str, SpeedModel], make_points: Callable[..., Points]
) -> None:
    fits = select_model(*make_points(truths["usl"], levels=PROFILE_LEVELS, seed=2))
    assert fits.best.kind == "usl"
    assert {r.kind for r in fits.reports} == set(MODELS)
    assert fits.best.level_error < 0.02 and fits.best.r2 > 0.95
    assert all(isinstance(r.model, MODELS[r.kind]) for r in fits.reports)
    assert fits.cross_validated and fits.held_out == [2.0, 4.0, 8.0, 16.0, 32.0]
    assert set(fits.best.level_errors) == set(map(float, PROFILE_LEVELS))


def test_select_picks_the_generating_model(
    truths: dict[str, SpeedModel], make_points: Callable[..., Points]
) -> None:
    fits = select_model(*make_points(truths["logdecay"], levels=PROFILE_LEVELS, seed=4))
    assert fits.best.kind == "logdecay"


def test_select_keeps_a_lone_request_that_runs_twice_as_fast(
    make_points: Callable[..., Points],
) -> None:
    """llama.cpp's shape on a CPU (docs/profile.md): USL must miss L=1 or L=2; usl-solo fits."""
    truth = SoloUSLModel(lam=200.0, sigma=0.35, kappa=0.004, solo=400.0)
    fits = select_model(*make_points(truth, levels=(1, 2, 4, 8, 16, 32), n=120, noise=0.03))
    assert fits.best.kind == "usl-solo"
    usl = next(r for r in fits.reports if r.kind == "usl")
    assert usl.level_error > fits.best.level_error + TIE
    assert fits.best.model.predict(1.0) == pytest.approx(400.0, rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["usl", "usl-solo"])
def test_selection_does_not_flip_with_the_noise(
    truths: dict[str, SpeedModel], make_points: Callable[..., Points], kind: str
) -> None:
    """Twenty noisy profiles of one curve (5% noise, 20 points per level): one choice."""
    truth = truths[kind]
    kept = {
        select_model(*make_points(truth, levels=(1, 2, 4, 8, 16, 32), n=120, seed=s)).best.kind
        for s in range(20)
    }
    assert kept == {kind}


def test_select_by_explicit_levels_and_held_out_levels(
    truths: dict[str, SpeedModel], make_points: Callable[..., Points]
) -> None:
    loads, speeds = make_points(truths["usl"], levels=(1, 2, 4, 8, 16), n=200, seed=3)
    # Measured loads near the nominal level they were held at.
    jitter = np.maximum(loads * (1.0 - 0.004 * np.random.default_rng(0).random(loads.size)), 1.0)
    fits = select_model(jitter, speeds, levels=loads, held_out=[4, 8])
    assert fits.held_out == [4.0, 8.0] and not fits.cross_validated
    assert fits.scoring == "held-out levels 4, 8"
    assert fits.best.kind == "usl"


@pytest.mark.parametrize("levels", [(1, 8, 32), tuple(range(1, 65))])
def test_select_with_few_or_many_levels(
    truths: dict[str, SpeedModel], make_points: Callable[..., Points], levels: tuple[int, ...]
) -> None:
    fits = select_model(*make_points(truths["usl"], n=300, levels=levels))
    assert fits.best.r2 > 0.9
    if len(levels) < 4:
        assert fits.held_out == [] and fits.scoring.startswith("in-sample")
    else:  # 64 distinct loads: grouped into 32 levels of equal counts
        assert len(fits.held_out) == 30


def test_select_rejects_data_it_cannot_fit() -> None:
    with pytest.raises(FitError, match="at least 2 points"):
        select_model([1.0], [3.0])
    with pytest.raises(FitError, match="2 distinct load levels"):
        select_model([4.0, 4.0, 4.0], [3.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="label every point"):
        select_model([1.0, 2.0, 3.0], [3.0, 2.0, 1.0], levels=[1, 2])


def test_interior_levels() -> None:
    assert interior_levels([1, 2, 4, 8, 16, 32, 64]) == [2, 4, 8, 16, 32]
    assert interior_levels([8, 1, 2, 4, 4]) == [2, 4]
    assert interior_levels([1, 2, 4]) == []


def _report(kind: str, level_error: float) -> FitReport:
    model = MODELS[kind].fit([1.0, 2.0, 3.0, 4.0], [40.0, 30.0, 24.0, 20.0])
    return FitReport(kind, model, level_error, {}, 0.9, 0.1, 0.9, 0.9)


@pytest.mark.parametrize(
    ("errors", "first"),
    [
        ({"linear": 0.040, "usl": 0.045}, "usl"),  # within TIE: the earlier model
        ({"linear": 0.030, "usl": 0.045}, "linear"),
        ({"usl-solo": 0.030, "usl": 0.045}, "usl-solo"),
        ({"usl-solo": 0.038, "usl": 0.045}, "usl"),
        ({"logistic": 0.05, "usl": 0.03, "linear": 0.09}, "usl"),
        ({"logistic": 0.05, "linear": 0.09}, "logistic"),
    ],
)
def test_ranking_keeps_the_first_model_within_tie_of_the_best(
    errors: dict[str, float], first: str
) -> None:
    in_order = [_report(kind, errors[kind]) for kind in MODELS if kind in errors]
    ranked = _ranked(in_order)
    assert ranked[0].kind == first
    rest = [r.level_error for r in ranked[1:]]
    assert rest == sorted(rest)


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
