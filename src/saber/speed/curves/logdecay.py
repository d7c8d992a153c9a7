"""Log decay, after MaaSO's throughput-decay function."""

from __future__ import annotations

import math

import numpy as np

from saber.speed._data import FloatArray
from saber.speed.curves.affine import AffineDecayModel


class LogDecayModel(AffineDecayModel):
    """f(L) = a - b*ln(L), floored at SPEED_FLOOR so it never reaches 0.

    a > 0 is the single-request speed f(1) (MaaSO's baseline throughput); b >= 0
    is how strongly speed decays with the logarithm of the load. MaaSO also
    truncates the decay at the engine's batch size; here the gateway sets L,
    so there is no truncation.
    """

    kind = "logdecay"

    @staticmethod
    def _g_scalar(load: float) -> float:
        return math.log(load)

    @staticmethod
    def _g_array(loads: FloatArray) -> FloatArray:
        logs: FloatArray = np.log(loads)
        return logs
