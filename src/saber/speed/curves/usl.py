"""Universal Scalability Law: the paper's default speed model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

import numpy as np

from saber.speed._base import SPEED_FLOOR, SpeedModel, as_vector
from saber.speed._data import FitData, FloatArray
from saber.speed._fitting import Problem


class USLModel(SpeedModel):
    """f(L) = lam / (1 + sigma*(L-1) + kappa*L*(L-1)), i.e. USL throughput X(L) / L.

    lam > 0 is the single-request speed f(1); 0 <= sigma <= 1 is contention;
    kappa >= 0 is coherency (crosstalk). With fewer than 3 distinct load levels
    kappa is not identifiable and the fit holds it at 0.
    """

    kind = "usl"
    param_names = ("lam", "sigma", "kappa")

    def __init__(self, **params: float) -> None:
        super().__init__(**params)
        self._lam, self._sigma, self._kappa = (self._values[n] for n in self.param_names)

    def _scalar(self, load: float) -> float:
        speed = self._lam / (1.0 + self._sigma * (load - 1.0) + self._kappa * load * (load - 1.0))
        return speed if speed > SPEED_FLOOR else SPEED_FLOOR

    @classmethod
    def _check(cls, values: Mapping[str, float]) -> None:
        check_usl(cls, values)

    @staticmethod
    def _raw(x: FloatArray, loads: FloatArray) -> FloatArray:
        lam, sigma, kappa = x
        speeds: FloatArray = lam / (1.0 + sigma * (loads - 1.0) + kappa * loads * (loads - 1.0))
        return speeds

    @staticmethod
    def _jac(x: FloatArray, loads: FloatArray) -> FloatArray:
        lam, sigma, kappa = x
        grow = loads * (loads - 1.0)
        denom = 1.0 + sigma * (loads - 1.0) + kappa * grow
        slope = -lam / (denom * denom)
        return np.column_stack((1.0 / denom, slope * (loads - 1.0), slope * grow))

    def _vector(self) -> FloatArray:
        return as_vector(self._lam, self._sigma, self._kappa)

    @classmethod
    def _from_vector(cls, x: FloatArray) -> Self:
        return cls(lam=float(x[0]), sigma=float(x[1]), kappa=float(x[2]))

    @classmethod
    def _problem(cls, data: FitData) -> Problem:
        with_kappa = data.n_levels >= 3
        loads, speeds = data.level_loads, data.level_speeds
        starts = [linearised_start(loads, speeds, with_kappa=False)]
        if with_kappa:
            starts.append(linearised_start(loads, speeds, with_kappa=True))
            top_load, top_speed = data.level_loads[-1], data.level_speeds[-1]
            lam = 1.05 * float(data.level_speeds.max())
            kappa = max(lam / top_speed - 1.0, 0.0) / (top_load * (top_load - 1.0))
            starts.append(as_vector(lam, 0.0, kappa))
        return Problem(
            kind=cls.kind,
            raw=cls._raw,
            jac=cls._jac,
            lower=as_vector(SPEED_FLOOR, 0.0, 0.0),
            upper=as_vector(np.inf, 1.0, np.inf),
            starts=starts,
            free=np.array([True, True, with_kappa]),
        )


def check_usl(model: type[SpeedModel], values: Mapping[str, float]) -> None:
    """USL's bounds on lam, sigma and kappa, named in a ParamError of ``model``."""
    if values["lam"] <= 0:
        raise model._bad("lam", f"must be > 0, got {values['lam']}")
    if not 0.0 <= values["sigma"] <= 1.0:
        raise model._bad("sigma", f"must be between 0 and 1, got {values['sigma']}")
    if values["kappa"] < 0:
        raise model._bad("kappa", f"must be >= 0, got {values['kappa']}")


def linearised_start(loads: FloatArray, speeds: FloatArray, *, with_kappa: bool) -> FloatArray:
    """USL is linear in 1/f: solve for (1/lam, sigma/lam, kappa/lam) >= 0 on level medians."""
    from scipy.optimize import nnls  # fitting only: evaluating f(L) needs no scipy

    columns = [np.ones_like(loads), loads - 1.0]
    if with_kappa:
        columns.append(loads * (loads - 1.0))
    # Scaling each row by its speed makes the residuals relative, like the main fit.
    design = np.column_stack(columns) * speeds[:, None]
    coef, _ = nnls(design, np.ones_like(loads))
    if coef[0] <= 0:
        return as_vector(float(speeds.max()), 0.0, 0.0)
    kappa = coef[2] / coef[0] if with_kappa else 0.0
    return as_vector(1.0 / coef[0], min(coef[1] / coef[0], 1.0), kappa)
