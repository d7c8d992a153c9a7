"""Linear decay: the paper's weakest baseline (R^2 0.91), kept for comparison."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

import numpy as np

from saber.speed._base import SPEED_FLOOR, SpeedModel, as_vector
from saber.speed._data import FitData, FloatArray
from saber.speed._fitting import Problem


class LinearModel(SpeedModel):
    """f(L) = a - b*L, floored at SPEED_FLOOR so it never reaches 0.

    a > 0, b >= 0 (speed never rises with load).
    """

    kind = "linear"
    param_names = ("a", "b")

    def __init__(self, **params: float) -> None:
        super().__init__(**params)
        self._a, self._b = self._values["a"], self._values["b"]

    def _scalar(self, load: float) -> float:
        speed = self._a - self._b * load
        return speed if speed > SPEED_FLOOR else SPEED_FLOOR

    @classmethod
    def _check(cls, values: Mapping[str, float]) -> None:
        if values["a"] <= 0:
            raise cls._bad("a", f"must be > 0, got {values['a']}")
        if values["b"] < 0:
            raise cls._bad("b", f"must be >= 0, got {values['b']}")

    @staticmethod
    def _raw(x: FloatArray, loads: FloatArray) -> FloatArray:
        return x[0] - x[1] * loads

    @staticmethod
    def _jac(x: FloatArray, loads: FloatArray) -> FloatArray:
        return np.column_stack((np.ones_like(loads), -loads))

    def _vector(self) -> FloatArray:
        return as_vector(self._a, self._b)

    @classmethod
    def _from_vector(cls, x: FloatArray) -> Self:
        return cls(a=float(x[0]), b=float(x[1]))

    @classmethod
    def _problem(cls, data: FitData) -> Problem:
        slope, intercept = np.polyfit(data.level_loads, data.level_speeds, 1)
        return Problem(
            kind=cls.kind,
            raw=cls._raw,
            jac=cls._jac,
            lower=as_vector(SPEED_FLOOR, 0.0),
            upper=as_vector(np.inf, np.inf),
            starts=[as_vector(intercept, max(-slope, 0.0)), as_vector(data.level_speeds.max(), 0)],
            free=np.array([True, True]),
        )
