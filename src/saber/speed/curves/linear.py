"""Linear decay: the paper's weakest baseline (R^2 0.91), kept for comparison."""

from __future__ import annotations

from saber.speed._data import FloatArray
from saber.speed.curves.affine import AffineDecayModel


class LinearModel(AffineDecayModel):
    """f(L) = a - b*L, floored at SPEED_FLOOR so it never reaches 0.

    a > 0, b >= 0 (speed never rises with load).
    """

    kind = "linear"

    @staticmethod
    def _g_scalar(load: float) -> float:
        return load

    @staticmethod
    def _g_array(loads: FloatArray) -> FloatArray:
        return loads
