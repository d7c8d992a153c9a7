"""Choosing a speed model: every model fitted, scored on load levels it did not see.

The gateway compares a request's required speed with f(L) at every load, so what
matters is the relative error of the curve at each load level, whatever its speed:
10% off at L=16 is as bad as 10% off at L=1. Per-request R^2 does not measure that:
it is dominated by the fastest levels (a 400 tokens/s level outweighs a 25 tokens/s
one 250-fold) and by the spread between requests at one load, which no f(L) explains.
So models are ranked by their **level error**: the mean, over the levels, of
|f(L) / mean speed - 1|, where f is fitted without the level for each interior level
(leave one level out: interpolation, as the gateway uses the curve) and on every
point for the lowest and highest (which a fit without them would extrapolate to).

Two models closer than ``TIE`` in level error are as good as the measurement can
tell, and ranking them by that difference would flip from run to run with the noise.
So the kept model is the first one, in the order of ``MODELS`` (USL, the paper's
model, first), whose level error is within ``TIE`` of the best.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from saber.speed._base import SpeedModel
from saber.speed._data import as_points, group_levels, prepare
from saber.speed._errors import FitError
from saber.speed._metrics import mean_abs_pct_error, r_squared
from saber.speed._registry import MODELS

TIE = 0.01
"""Level errors closer than this (one percentage point) do not rank two models."""

MIN_CV_LEVELS = 4
"""Levels needed to leave interior ones out: a fit keeps at least 3, USL's parameters."""


@dataclass(frozen=True)
class FitReport:
    """One model: fitted on every point, and how well it did.

    ``level_error`` ranks the models (see the module's docstring); ``r2`` and ``mape``
    are over the requests of the scored levels, predicted by fits that did not see
    them; ``level_r2`` is the R^2 of those levels' mean speeds; ``in_sample_r2`` is
    over every point, of the model fitted on all of them. With too few levels to leave
    any out, every score is in-sample.
    """

    kind: str
    model: SpeedModel
    level_error: float
    level_errors: dict[float, float]
    r2: float
    mape: float
    level_r2: float
    in_sample_r2: float


@dataclass(frozen=True)
class Selection:
    """Every model that could be fitted, the kept one first, and how they were scored."""

    reports: list[FitReport]
    held_out: list[float]
    """The levels left out and scored (empty: scored in-sample)."""
    cross_validated: bool = False
    """Each of ``held_out`` was left out in turn; otherwise they were left out together."""

    @property
    def best(self) -> FitReport:
        return self.reports[0]

    @property
    def scoring(self) -> str:
        levels = ", ".join(f"{level:g}" for level in self.held_out)
        if not self.held_out:
            return "in-sample (too few levels to leave any out)"
        if self.cross_validated:
            return f"leave-one-level-out over levels {levels}"
        return f"held-out levels {levels}"


def interior_levels(levels: Sequence[float]) -> list[float]:
    """The levels that can be left out in turn: all but the lowest and the highest, given
    ``MIN_CV_LEVELS`` or more (fewer would leave a fit under 3 levels)."""
    ordered = sorted(set(levels))
    return ordered[1:-1] if len(ordered) >= MIN_CV_LEVELS else []


def select_model(
    loads: ArrayLike,
    speeds: ArrayLike,
    *,
    levels: ArrayLike | None = None,
    held_out: Sequence[float] | None = None,
) -> Selection:
    """Fit every model in ``MODELS`` to measured (load, speed) points and rank them.

    ``levels`` labels each point with the load level it was measured at (saber-profile's
    nominal L); by default points whose loads are within 1% share a level. With
    ``held_out`` None each interior level is left out in turn; given, those levels are
    left out together and scored. A model that cannot be fitted on every fold is left
    out; FitError when none can be fitted.
    """
    x, y = as_points(loads, speeds, error=FitError)
    prepare(x, y)  # FitError for data no model can be fitted to
    label = _levels(x, levels)
    names = sorted(set(label.tolist()))
    if held_out is not None:
        held = sorted({float(level) for level in held_out} & set(names))
        folds = [held] if held and len(names) - len(held) >= 2 else []
    else:
        held = interior_levels(names)
        folds = [[level] for level in held]
    if not folds:
        held = []
    unseen = _fold_predictions(x, y, label, folds)
    reports = []
    for kind, cls in MODELS.items():
        if kind not in unseen:
            continue
        try:
            model = cls.fit(x, y)
        except FitError:
            continue
        reports.append(_report(kind, model, x, y, label, held, unseen[kind]))
    if not reports:
        raise FitError("no speed model could be fitted on every fold and on all the points")
    return Selection(_ranked(reports), [float(h) for h in held], held_out is None and bool(held))


def _levels(loads: np.ndarray, levels: ArrayLike | None) -> np.ndarray:
    if levels is not None:
        label = np.asarray(levels, dtype=float)
        if label.shape != loads.shape:
            raise ValueError(f"levels must label every point: {label.shape} != {loads.shape}")
        return label
    label = np.empty_like(loads)
    for group in group_levels(loads, max_groups=32):
        label[group] = float(np.median(loads[group]))
    return label


def _fold_predictions(
    x: np.ndarray, y: np.ndarray, label: np.ndarray, folds: list[list[float]]
) -> dict[str, np.ndarray]:
    """Per model, its predictions for each fold's points by a fit without them (NaN
    elsewhere); models that cannot be fitted on some fold are missing."""
    out = {kind: np.full(x.size, np.nan) for kind in MODELS}
    for fold in folds:
        test = np.isin(label, fold)
        for kind in list(out):
            try:
                trial = MODELS[kind].fit(x[~test], y[~test])
            except FitError:
                del out[kind]
                continue
            out[kind][test] = trial.predict(x[test])
    return out


def _report(
    kind: str,
    model: SpeedModel,
    x: np.ndarray,
    y: np.ndarray,
    label: np.ndarray,
    held: list[float],
    unseen: np.ndarray,
) -> FitReport:
    fitted = model.predict(x)
    # Each level judged by the curve that did not see it, where there is one.
    predicted = np.where(np.isnan(unseen), fitted, unseen)
    errors = {}
    for level in sorted(set(label.tolist())):
        at = label == level
        errors[level] = float(predicted[at].mean() / y[at].mean() - 1.0)
    scored = np.isin(label, held) if held else np.ones(x.size, dtype=bool)
    actual, guess = y[scored], predicted[scored]
    return FitReport(
        kind=kind,
        model=model,
        level_error=float(np.mean(np.abs(list(errors.values())))),
        level_errors=errors,
        r2=r_squared(actual, guess),
        mape=mean_abs_pct_error(actual, guess),
        level_r2=_level_r2(label[scored], actual, guess),
        in_sample_r2=r_squared(y, fitted),
    )


def _level_r2(label: np.ndarray, actual: np.ndarray, predicted: np.ndarray) -> float:
    groups = [label == level for level in np.unique(label)]
    return r_squared([actual[g].mean() for g in groups], [predicted[g].mean() for g in groups])


def _ranked(reports: list[FitReport]) -> list[FitReport]:
    """The first model (in ``MODELS`` order) within ``TIE`` of the best level error, then
    the others, best first."""
    least = min(r.level_error for r in reports)
    kept = next(r for r in reports if r.level_error <= least + TIE)
    rest = sorted((r for r in reports if r is not kept), key=lambda r: r.level_error)
    return [kept, *rest]
