"""Fitting every model and ranking them on held-out points."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from saber.speed._base import SpeedModel
from saber.speed._data import FloatArray, prepare
from saber.speed._errors import FitError
from saber.speed._metrics import mape, r2_score
from saber.speed._registry import MODELS

USL_TIE = 0.005
"""USL ranks first unless another model beats its held-out R^2 by at least this."""


@dataclass(frozen=True)
class FitReport:
    """One model's fit: the model (refitted on all points) and its held-out scores."""

    kind: str
    model: SpeedModel
    r2: float
    mape: float


def fit_all(
    loads: ArrayLike, speeds: ArrayLike, *, holdout: float = 0.2, seed: int = 0
) -> list[FitReport]:
    """Fit every model in MODELS and rank them, best first, by held-out R^2.

    With 4 or more distinct load levels whole interior levels are held out (so
    the score measures interpolation to unseen loads); otherwise random points
    are. `holdout=0` scores on the training points. Models that cannot be fitted
    are left out; FitError if none can.
    """
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout must be in [0, 1), got {holdout}")
    data = prepare(loads, speeds)
    x, y = data.loads, data.speeds
    test = _held_out(x, holdout, np.random.default_rng(seed))
    train = ~test if test.any() else np.ones_like(test)
    if not test.any():
        test = train
    reports: list[FitReport] = []
    failures: list[str] = []
    for kind, cls in MODELS.items():
        try:
            trial = cls.fit(x[train], y[train])
            model = cls.fit(x, y) if holdout > 0 else trial
        except FitError as exc:
            failures.append(str(exc))
            continue
        reports.append(
            FitReport(kind, model, r2_score(trial, x[test], y[test]), mape(trial, x[test], y[test]))
        )
    if not reports:
        raise FitError("no speed model could be fitted: " + "; ".join(failures))
    return rank(reports)


def rank(
    reports: list[FitReport], score: Callable[[FitReport], float] | None = None
) -> list[FitReport]:
    """Best ``score`` first (default: held-out R^2); USL wins ties closer than USL_TIE."""
    value = score or (lambda r: r.r2)
    return sorted(
        reports, key=lambda r: value(r) + (USL_TIE if r.kind == "usl" else 0.0), reverse=True
    )


def _held_out(loads: FloatArray, holdout: float, rng: np.random.Generator) -> NDArray[np.bool_]:
    if holdout == 0.0:
        return np.zeros(loads.size, dtype=bool)
    levels = np.unique(loads)
    if levels.size >= 4:
        # Keep the extreme levels, and at least 3 levels, for training.
        count = min(max(round(holdout * levels.size), 1), levels.size - 3)
        return np.isin(loads, rng.choice(levels[1:-1], size=count, replace=False))
    count = min(max(round(holdout * loads.size), 1), loads.size - 2)
    mask = np.zeros(loads.size, dtype=bool)
    mask[rng.choice(loads.size, size=max(count, 0), replace=False)] = True
    return mask
