"""Decreasing logistic: the paper's middle baseline (R^2 0.97)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Self

import numpy as np

from saber.speed._base import SPEED_FLOOR, SpeedModel, as_vector
from saber.speed._data import FitData, FloatArray
from saber.speed._fitting import Problem


class LogisticModel(SpeedModel):
    """f(L) = d + (a - d) / (1 + exp(k*(L - l0))).

    A falling S-curve from the upper plateau a > 0 towards the floor speed d,
    with 0 <= d <= a; k >= 0 is the steepness and l0 the load at the midpoint.
    Internally the fit uses the ratio d/a in [0, 1] so that d <= a is a box
    bound. With fewer than 4 distinct load levels d is held at 0.
    """

    kind = "logistic"
    param_names = ("a", "d", "k", "l0")

    def __init__(self, **params: float) -> None:
        super().__init__(**params)
        self._a, self._d, self._k, self._l0 = (self._values[n] for n in self.param_names)

    def _scalar(self, load: float) -> float:
        z = self._k * (load - self._l0)
        share = 0.0 if z > 700.0 else 1.0 / (1.0 + math.exp(z))
        speed = self._d + (self._a - self._d) * share
        return speed if speed > SPEED_FLOOR else SPEED_FLOOR

    @classmethod
    def _check(cls, values: Mapping[str, float]) -> None:
        if values["a"] <= 0:
            raise cls._bad("a", f"must be > 0, got {values['a']}")
        if not 0.0 <= values["d"] <= values["a"]:
            raise cls._bad("d", f"must be between 0 and a ({values['a']}), got {values['d']}")
        if values["k"] < 0:
            raise cls._bad("k", f"must be >= 0, got {values['k']}")

    @staticmethod
    def _raw(x: FloatArray, loads: FloatArray) -> FloatArray:
        a, ratio, k, l0 = x
        speeds: FloatArray = a * (ratio + (1.0 - ratio) * _share(k * (loads - l0)))
        return speeds

    @staticmethod
    def _jac(x: FloatArray, loads: FloatArray) -> FloatArray:
        a, ratio, k, l0 = x
        share = _share(k * (loads - l0))
        bend = a * (1.0 - ratio) * share * (1.0 - share)
        return np.column_stack(
            (ratio + (1.0 - ratio) * share, a * (1.0 - share), -bend * (loads - l0), bend * k)
        )

    def _vector(self) -> FloatArray:
        return as_vector(self._a, self._d / self._a, self._k, self._l0)

    @classmethod
    def _from_vector(cls, x: FloatArray) -> Self:
        a, ratio, k, l0 = (float(v) for v in x)
        return cls(a=a, d=min(ratio * a, a), k=k, l0=l0)

    @classmethod
    def _problem(cls, data: FitData) -> Problem:
        loads, speeds = data.level_loads, data.level_speeds
        span = max(data.span, 1.0)
        top, bottom = float(speeds.max()), float(speeds.min())
        with_floor = data.n_levels >= 4
        ratio = 0.5 * bottom / top if with_floor else 0.0
        below = np.flatnonzero(speeds <= 0.5 * (top + bottom))
        middle = float(loads[below[0]]) if below.size else float(loads[-1])
        starts = [
            as_vector(1.05 * top, ratio, 4.0 / span, middle),
            as_vector(1.05 * top, ratio, 1.0 / span, middle),
            as_vector(2.0 * top, 0.0, 2.0 / span, float(loads[0])),
        ]
        return Problem(
            kind=cls.kind,
            raw=cls._raw,
            jac=cls._jac,
            lower=as_vector(SPEED_FLOOR, 0.0, 0.0, float(loads[0]) - 2.0 * span),
            upper=as_vector(1e3 * top, 1.0, 50.0 / span, float(loads[-1]) + 2.0 * span),
            starts=starts,
            free=np.array([True, with_floor, True, True]),
        )


def _share(z: FloatArray) -> FloatArray:
    """1 / (1 + exp(z)), as ``_scalar`` computes it (numpy alone, no overflow)."""
    return np.where(z > 700.0, 0.0, 1.0 / (1.0 + np.exp(np.minimum(z, 700.0))))
