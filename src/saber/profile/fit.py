"""Fitting the measured points: every speed model, scored on unseen load levels; and TTFT.

Speed models are scored on load levels left out of their fit, because the
gateway evaluates f(L) at loads between the profiled ones: the score should
measure interpolation, not how well a curve passes through the points it was
fitted to. By default every interior level is left out in turn (leave one level
out) and the predictions for all of them are scored together; a single split
scored on two levels would let one noisy level decide the ranking. Each model is
then refitted on every point. A model is ranked by the lower of its held-out R^2
and its R^2 on every point after the refit: a curve must predict the levels it
did not see and also pass through the ones it did (leaving out interior levels
never tests the lowest, where a CPU engine's single request can run well above
the trend). USL, the paper's model, wins unless another model beats it by
``USL_TIE`` (0.005) or more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from saber.profile.points import Point
from saber.speed import (
    MODELS,
    USL_TIE,
    FitError,
    FitReport,
    TTFTFit,
    fit_all,
    fit_model,
    r2_score,
    rank,
)
from saber.speed import fit_ttft as speed_fit_ttft

__all__ = ["USL_TIE", "SpeedFits", "choose_held_out", "fit_speed", "fit_ttft"]


@dataclass(frozen=True)
class SpeedFits:
    """Every model that could be fitted, best first, and how their scores were made.

    ``held_out`` lists the levels scored; ``cross_validated`` says each was left
    out in turn (otherwise they were left out together). With no held-out levels
    the scores are on the fitted points themselves.
    """

    reports: list[FitReport]
    held_out: list[int]
    cross_validated: bool = False
    level_r2: dict[str, float] = field(default_factory=dict)
    """Per model, R^2 of the scored levels' mean speeds: how well the curve follows the
    load, apart from the spread between requests at one load (a task mix's, mostly)."""
    in_sample_r2: dict[str, float] = field(default_factory=dict)
    """Per model, R^2 on every point of the model refitted on all of them."""

    @property
    def best(self) -> FitReport:
        return self.reports[0]

    @property
    def scoring(self) -> str:
        levels = ", ".join(map(str, self.held_out))
        if not self.held_out:
            return "in-sample (too few levels to leave any out)"
        if self.cross_validated:
            return f"leave-one-level-out over levels {levels}"
        return f"held-out levels {levels}"


def choose_held_out(levels: Sequence[int]) -> list[int]:
    """The levels that can be left out: all but the lowest and the highest, given 4 or more.

    Fewer than 4 levels would leave a fit with under 3 levels, too few for USL's
    three parameters.
    """
    ordered = sorted(set(levels))
    return ordered[1:-1] if len(ordered) >= 4 else []


def fit_speed(points: Sequence[Point], held_out: Sequence[int] | None = None) -> SpeedFits:
    """Fit every speed model to the points; FitError if none can be fitted.

    ``held_out`` None: leave each interior level out in turn. Given: leave those
    levels out together, fit on the rest, and score on them.
    """
    if not points:
        raise FitError("no points to fit")
    loads = np.array([p.load for p in points])
    speeds = np.array([p.speed for p in points])
    levels = np.array([p.level for p in points])
    if held_out is not None:
        held = sorted({int(x) for x in held_out} & set(levels.tolist()))
        folds = [held] if held and len(set(levels.tolist()) - set(held)) >= 2 else []
    else:
        held = choose_held_out(levels.tolist())
        folds = [[level] for level in held]
    if not folds:
        reports = fit_all(loads, speeds, holdout=0.0)
        means = {r.kind: _level_r2(levels, speeds, r.model.predict(loads)) for r in reports}
        return SpeedFits(reports, [], level_r2=means, in_sample_r2={r.kind: r.r2 for r in reports})
    predictions: dict[str, np.ndarray] = {}
    fitted_every_fold: set[str] | None = None
    for fold in folds:
        test = np.isin(levels, fold)
        trials = {r.kind: r.model for r in fit_all(loads[~test], speeds[~test], holdout=0.0)}
        fitted = set(trials)
        fitted_every_fold = fitted if fitted_every_fold is None else fitted_every_fold & fitted
        for kind, trial in trials.items():
            out = predictions.setdefault(kind, np.full(loads.size, np.nan))
            out[test] = trial.predict(loads[test])
    scored = np.isin(levels, held)
    reports = []
    means = {}
    in_sample = {}
    for kind in MODELS:  # a model that cannot be fitted on some fold is not scored
        if kind not in (fitted_every_fold or set()):
            continue
        try:
            model = fit_model(kind, loads, speeds)
        except FitError:
            continue
        actual, predicted = speeds[scored], predictions[kind][scored]
        reports.append(FitReport(kind, model, _r2(actual, predicted), _mape(actual, predicted)))
        means[kind] = _level_r2(levels[scored], actual, predicted)
        in_sample[kind] = r2_score(model, loads, speeds)
    if not reports:
        raise FitError("no speed model could be fitted on every fold and on all the points")
    return SpeedFits(
        rank(reports, score=lambda r: min(r.r2, in_sample[r.kind])),
        held,
        cross_validated=held_out is None,
        level_r2=means,
        in_sample_r2=in_sample,
    )


def _level_r2(levels: np.ndarray, actual: np.ndarray, predicted: np.ndarray) -> float:
    groups = [levels == level for level in np.unique(levels)]
    return _r2(
        np.array([actual[g].mean() for g in groups]),
        np.array([predicted[g].mean() for g in groups]),
    )


def _r2(actual: np.ndarray, predicted: np.ndarray) -> float:
    """``saber.speed.r2_score`` for predictions made by several fits."""
    residual = float(np.sum((actual - predicted) ** 2))
    total = float(np.sum((actual - actual.mean()) ** 2))
    if total == 0.0:
        return 1.0 if residual == 0.0 else 0.0
    return 1.0 - residual / total


def _mape(actual: np.ndarray, predicted: np.ndarray) -> float:
    """``saber.speed.mape`` for predictions made by several fits."""
    return float(np.mean(np.abs(predicted - actual) / actual))


def fit_ttft(points: Sequence[Point]) -> TTFTFit | None:
    """The TTFT fit of the points that have a TTFT (``saber.speed.fit_ttft``)."""
    usable = [p for p in points if p.ttft_s is not None]
    if len({p.level for p in usable}) < 2:
        return None
    return speed_fit_ttft(
        [p.prompt_tokens for p in usable], [p.load for p in usable], [p.ttft_s for p in usable]
    )
