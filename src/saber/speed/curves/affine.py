"""Speed falling linearly in some transform of the load: f(L) = a - b*g(L)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Self

import numpy as np

from saber.speed._base import SPEED_FLOOR, SpeedModel, as_vector
from saber.speed._data import FitData, FloatArray
from saber.speed._fitting import Problem


class AffineDecayModel(SpeedModel):
    """f(L) = a - b*g(L), floored at SPEED_FLOOR; a > 0, b >= 0.

    Linear (g = L) and MaaSO's log decay (g = ln L) differ only in g, so they
    share the fit: a straight line through the per-level medians in g(L) starts it.
    """

    param_names = ("a", "b")

    @staticmethod
    @abstractmethod
    def _g_scalar(load: float) -> float: ...

    @staticmethod
    @abstractmethod
    def _g_array(loads: FloatArray) -> FloatArray: ...

    def __init__(self, **params: float) -> None:
        super().__init__(**params)
        self._a, self._b = self._values["a"], self._values["b"]

    def _scalar(self, load: float) -> float:
        speed = self._a - self._b * type(self)._g_scalar(load)
        return speed if speed > SPEED_FLOOR else SPEED_FLOOR

    @classmethod
    def _check(cls, values: Mapping[str, float]) -> None:
        if values["a"] <= 0:
            raise cls._bad("a", f"must be > 0, got {values['a']}")
        if values["b"] < 0:
            raise cls._bad("b", f"must be >= 0, got {values['b']}")

    @classmethod
    def _raw(cls, x: FloatArray, loads: FloatArray) -> FloatArray:
        speeds: FloatArray = x[0] - x[1] * cls._g_array(loads)
        return speeds

    @classmethod
    def _jac(cls, x: FloatArray, loads: FloatArray) -> FloatArray:
        return np.column_stack((np.ones_like(loads), -cls._g_array(loads)))

    def _vector(self) -> FloatArray:
        return as_vector(self._a, self._b)

    @classmethod
    def _from_vector(cls, x: FloatArray) -> Self:
        return cls(a=float(x[0]), b=float(x[1]))

    @classmethod
    def _problem(cls, data: FitData) -> Problem:
        slope, intercept = np.polyfit(cls._g_array(data.level_loads), data.level_speeds, 1)
        return Problem(
            kind=cls.kind,
            raw=cls._raw,
            jac=cls._jac,
            lower=as_vector(SPEED_FLOOR, 0.0),
            upper=as_vector(np.inf, np.inf),
            starts=[as_vector(intercept, max(-slope, 0.0)), as_vector(data.level_speeds.max(), 0)],
            free=np.array([True, True]),
        )
