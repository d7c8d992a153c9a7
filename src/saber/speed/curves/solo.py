"""USL with a lone request's own speed, for engines whose batch of one is a special case."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Self

import numpy as np

from saber.speed._base import SPEED_FLOOR, SpeedModel, as_vector
from saber.speed._data import FitData, FloatArray
from saber.speed._fitting import Problem
from saber.speed.curves.usl import check_usl, linearised_start

BONUS_LIMIT = 20.0
"""A lone request at most 21x as fast as the batched curve says: wider is a broken profile."""


class SoloUSLModel(SpeedModel):
    """USL for two or more requests; a lone request runs at its own speed ``solo``.

    llama.cpp on a CPU decodes one sequence through a matrix-vector path and two or
    more through a batched one, so one request runs about twice as fast as two while
    the batched loads follow USL (docs/profile.md). USL alone must then miss either
    L=1 or L=2 by 15-20%. Here f(L) = lam / (1 + sigma*(L-1) + kappa*L*(L-1)) for
    L >= 2 and f(1) = solo >= lam; between 1 and 2 (time-averaged loads) the bonus
    fades out linearly in USL's denominator, so that with solo = lam this is USL.
    Without points below L=1.5 and three load levels above, solo is held at lam.
    """

    kind = "usl-solo"
    param_names = ("lam", "sigma", "kappa", "solo")

    def __init__(self, **params: float) -> None:
        super().__init__(**params)
        self._lam, self._sigma, self._kappa, self._solo = (
            self._values[n] for n in self.param_names
        )

    def _scalar(self, load: float) -> float:
        denom = 1.0 + self._sigma * (load - 1.0) + self._kappa * load * (load - 1.0)
        if load < 2.0:
            bonus = self._solo / self._lam - 1.0  # as in _vector, so both paths agree
            denom -= (2.0 - load) * bonus / (1.0 + bonus)
        speed = self._lam / denom
        return speed if speed > SPEED_FLOOR else SPEED_FLOOR

    @classmethod
    def _check(cls, values: Mapping[str, float]) -> None:
        check_usl(cls, values)
        if not values["lam"] <= values["solo"] <= (1.0 + BONUS_LIMIT) * values["lam"]:
            raise cls._bad(
                "solo", f"must be between lam ({values['lam']}) and {1.0 + BONUS_LIMIT:g}x lam"
            )

    @staticmethod
    def _raw(x: FloatArray, loads: FloatArray) -> FloatArray:
        lam, sigma, kappa, bonus = x
        alone = np.clip(2.0 - loads, 0.0, 1.0)
        denom = 1.0 + sigma * (loads - 1.0) + kappa * loads * (loads - 1.0)
        speeds: FloatArray = lam / (denom - alone * bonus / (1.0 + bonus))
        return speeds

    @staticmethod
    def _jac(x: FloatArray, loads: FloatArray) -> FloatArray:
        lam, sigma, kappa, bonus = x
        alone = np.clip(2.0 - loads, 0.0, 1.0)
        grow = loads * (loads - 1.0)
        denom = 1.0 + sigma * (loads - 1.0) + kappa * grow - alone * bonus / (1.0 + bonus)
        slope = -lam / (denom * denom)
        return np.column_stack(
            (
                1.0 / denom,
                slope * (loads - 1.0),
                slope * grow,
                slope * -alone / (1.0 + bonus) ** 2,
            )
        )

    def _vector(self) -> FloatArray:
        return as_vector(self._lam, self._sigma, self._kappa, self._solo / self._lam - 1.0)

    @classmethod
    def _from_vector(cls, x: FloatArray) -> Self:
        lam, sigma, kappa, bonus = (float(v) for v in x)
        return cls(lam=lam, sigma=sigma, kappa=kappa, solo=lam * (1.0 + bonus))

    @classmethod
    def _problem(cls, data: FitData) -> Problem:
        loads, speeds = data.level_loads, data.level_speeds
        batched = loads >= 1.5
        alone = data.loads < 1.5  # raw points: level bins may mix L=1 with L=2
        with_solo = bool(alone.any()) and int(batched.sum()) >= 3
        starts = []
        if with_solo:
            solo = float(np.median(data.speeds[alone]))
            for with_kappa in (False, True):
                lam, sigma, kappa = linearised_start(
                    loads[batched], speeds[batched], with_kappa=with_kappa
                )
                bonus = min(max(solo / lam - 1.0, 0.0), BONUS_LIMIT)
                starts.append(as_vector(lam, sigma, kappa, bonus))
        with_kappa = data.n_levels >= 3
        starts += [
            as_vector(*linearised_start(loads, speeds, with_kappa=kappa), 0.0)
            for kappa in sorted({False, with_kappa})
        ]
        return Problem(
            kind=cls.kind,
            raw=cls._raw,
            jac=cls._jac,
            lower=as_vector(SPEED_FLOOR, 0.0, 0.0, 0.0),
            upper=as_vector(math.inf, 1.0, math.inf, BONUS_LIMIT),
            starts=starts,
            free=np.array([True, True, with_kappa, with_solo]),
        )
