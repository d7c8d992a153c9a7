"""How well a speed model matches measured points."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from saber.speed._base import SpeedModel
from saber.speed._data import as_points


def r2_score(model: SpeedModel, loads: ArrayLike, speeds: ArrayLike) -> float:
    """Coefficient of determination of the model's predictions (1 is perfect).

    For points that all share one speed it is 1.0 when matched exactly, else 0.0.
    """
    x, y = as_points(loads, speeds)
    residual = float(np.sum((y - model.predict(x)) ** 2))
    total = float(np.sum((y - y.mean()) ** 2))
    if total == 0.0:
        return 1.0 if residual == 0.0 else 0.0
    return 1.0 - residual / total


def mape(model: SpeedModel, loads: ArrayLike, speeds: ArrayLike) -> float:
    """Mean absolute percentage error, as a fraction (0.05 is 5%)."""
    x, y = as_points(loads, speeds)
    return float(np.mean(np.abs(model.predict(x) - y) / y))
