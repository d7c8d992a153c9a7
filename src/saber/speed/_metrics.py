"""How well predictions match measurements: R^2 and MAPE, the one place they are computed."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from saber.speed._base import SpeedModel
from saber.speed._data import as_points


def r_squared(actual: ArrayLike, predicted: ArrayLike) -> float:
    """Coefficient of determination of ``predicted`` against ``actual`` (1 is perfect).

    For measurements that all share one value it is 1.0 when matched exactly, else 0.0.
    """
    y, p = np.asarray(actual, dtype=float), np.asarray(predicted, dtype=float)
    residual = float(np.sum((y - p) ** 2))
    total = float(np.sum((y - y.mean()) ** 2))
    if total == 0.0:
        return 1.0 if residual == 0.0 else 0.0
    return 1.0 - residual / total


def mean_abs_pct_error(actual: ArrayLike, predicted: ArrayLike) -> float:
    """Mean of |predicted - actual| / actual, as a fraction (0.05 is 5%); ``actual`` > 0."""
    y, p = np.asarray(actual, dtype=float), np.asarray(predicted, dtype=float)
    return float(np.mean(np.abs(p - y) / y))


def r2_score(model: SpeedModel, loads: ArrayLike, speeds: ArrayLike) -> float:
    """``r_squared`` of the model's predictions for measured (load, speed) points."""
    x, y = as_points(loads, speeds)
    return r_squared(y, model.predict(x))


def mape(model: SpeedModel, loads: ArrayLike, speeds: ArrayLike) -> float:
    """``mean_abs_pct_error`` of the model's predictions for measured (load, speed) points."""
    x, y = as_points(loads, speeds)
    return mean_abs_pct_error(y, model.predict(x))
