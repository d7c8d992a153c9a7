"""Robust, bounded, multi-start least squares shared by every speed model.

Residuals are relative, (f(L) - y) / m with m the median speed at that load
level, because decode-speed noise is roughly multiplicative. Starts compete in
plain least squares on the level medians, which are robust already: a whole
level is never an outlier. The polish on every point uses the soft_l1 loss,
which bounds the pull of outlying points; its scale is the points' own spread
around their level's median (MAD), so that it adapts to how noisy the profile
really is and not to how badly a model misfits it. A polish that runs out of
evaluations counts as converged only if the cost has stopped falling.

scipy is imported when a fit runs, not with this module: evaluating f(L) (the gateway)
never needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from saber.speed._data import FitData, FloatArray
from saber.speed._errors import FitError

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

_SCALE_LIMITS = (0.002, 0.5)


@dataclass(frozen=True)
class Problem:
    """A model's fitting problem over its internal parameter vector.

    Entries where `free` is False stay at the value they have in each start.
    """

    kind: str
    raw: Callable[[FloatArray, FloatArray], FloatArray]
    jac: Callable[[FloatArray, FloatArray], FloatArray]
    lower: FloatArray
    upper: FloatArray
    starts: Sequence[FloatArray]
    free: NDArray[np.bool_]


def solve(problem: Problem, data: FitData) -> FloatArray:
    """Best internal parameter vector for the data; raises FitError if no start converges.

    Starts compete on the per-level medians (cheap and already robust); only the
    winner is polished on every point.
    """
    best: tuple[float, FloatArray] | None = None
    with np.errstate(all="ignore"):
        for start in problem.starts:
            full = np.clip(start, problem.lower, problem.upper)
            first = _Run(problem, full, data.level_loads, data.level_speeds, data.level_speeds)
            result = first(full[problem.free], None, max_nfev=30, tol=1e-4)
            if result is not None and (best is None or result.cost < best[0]):
                full[problem.free] = result.x
                best = (result.cost, full)
        if best is None:
            raise FitError(f"{problem.kind} fit failed: no starting point gave a finite solution")
        full = best[1]
        polish = _Run(problem, full, data.loads, data.speeds, data.typical)
        x0 = full[problem.free].copy()
        spread = 1.4826 * float(np.median(np.abs(data.speeds / data.typical - 1.0)))
        scale = float(np.clip(spread, *_SCALE_LIMITS))
        final = polish(x0, scale, max_nfev=400)
        if final is not None and final.status == 0:
            final = _settled(final, polish(final.x, scale, max_nfev=50))
    if final is None or final.status <= 0:
        raise FitError(f"{problem.kind} fit did not converge: {getattr(final, 'message', '')}")
    full[problem.free] = final.x
    return full


class _Run:
    """Relative residuals of one problem on one set of points, for least_squares."""

    def __init__(
        self,
        problem: Problem,
        full: FloatArray,
        loads: FloatArray,
        speeds: FloatArray,
        typical: FloatArray,
    ) -> None:
        self._problem, self._full = problem, full
        self._loads, self._speeds, self._inv = loads, speeds, 1.0 / typical
        self._lower, self._upper = problem.lower[problem.free], problem.upper[problem.free]

    def residuals(self, z: FloatArray) -> FloatArray:
        self._full[self._problem.free] = z
        return (self._problem.raw(self._full, self._loads) - self._speeds) * self._inv

    def jacobian(self, z: FloatArray) -> FloatArray:
        self._full[self._problem.free] = z
        jac = self._problem.jac(self._full, self._loads)[:, self._problem.free]
        return jac * self._inv[:, None]

    def __call__(
        self, x0: FloatArray, scale: float | None, max_nfev: int, tol: float = 1e-8
    ) -> OptimizeResult | None:
        """Least squares from ``x0``: soft_l1 at ``scale``, or plain with None."""
        from scipy.optimize import least_squares

        try:
            result = least_squares(
                self.residuals,
                np.clip(x0, self._lower, self._upper),
                jac=self.jacobian,
                bounds=(self._lower, self._upper),
                method="trf",
                loss="linear" if scale is None else "soft_l1",
                f_scale=1.0 if scale is None else scale,
                x_scale="jac",
                max_nfev=max_nfev,
                ftol=tol,
                xtol=tol,
                gtol=tol,
            )
        except (ValueError, np.linalg.LinAlgError, FloatingPointError):
            return None
        if not (np.all(np.isfinite(result.x)) and np.isfinite(result.cost)):
            return None
        return result


def _settled(first: OptimizeResult, more: OptimizeResult | None) -> OptimizeResult:
    """Accept a run that used up its evaluations if further steps no longer lower the cost.

    That happens in flat valleys where parameters trade off against each other
    (few levels, a model that fits the data poorly): the curve has converged even
    though the parameters still drift.
    """
    if more is None:
        return first
    if more.status > 0 or first.cost - more.cost <= 1e-4 * first.cost:
        more.status = max(more.status, 2)
    return more
