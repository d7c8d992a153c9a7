"""Linear decay: the paper's weakest baseline (R^2 0.91), kept for comparison."""

from __future__ import annotations

from typing import TypeVar

from saber.speed._affine import AffineDecayModel

T = TypeVar("T")


def _identity(load: T) -> T:
    return load


class LinearModel(AffineDecayModel):
    """f(L) = a - b*L, floored at SPEED_FLOOR so it never reaches 0.

    a > 0, b >= 0 (speed never rises with load).
    """

    kind = "linear"
    _g_scalar = staticmethod(_identity)
    _g_array = staticmethod(_identity)
