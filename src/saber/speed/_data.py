"""Checking and grouping (load, speed) measurements before they are fitted."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from saber.speed._errors import FitError

FloatArray = NDArray[np.float64]


def as_points(
    loads: ArrayLike, speeds: ArrayLike, *, error: type[ValueError] = ValueError
) -> tuple[FloatArray, FloatArray]:
    """Return loads and speeds as 1-D float arrays, or raise `error` naming the problem.

    Loads count the request itself, so they are >= 1; speeds are tokens/s, so > 0.
    """
    try:
        x = np.asarray(loads, dtype=float)
        y = np.asarray(speeds, dtype=float)
    except (TypeError, ValueError) as exc:
        raise error(f"loads and speeds must be numbers: {exc}") from None
    if x.ndim != 1 or y.ndim != 1:
        raise error(f"loads and speeds must be 1-D, got shapes {x.shape} and {y.shape}")
    if x.size != y.size:
        raise error(f"loads and speeds differ in length: {x.size} != {y.size}")
    if x.size == 0:
        raise error("no data points")
    for name, values in (("loads", x), ("speeds", y)):
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise error(f"{name} must be finite: {values[bad[0]]} at index {bad[0]}")
    low = np.flatnonzero(x < 1.0)
    if low.size:
        raise error(f"loads must be >= 1 (a request counts itself): {x[low[0]]} at index {low[0]}")
    nonpos = np.flatnonzero(y <= 0.0)
    if nonpos.size:
        raise error(f"speeds must be > 0: {y[nonpos[0]]} at index {nonpos[0]}")
    return x, y


LEVEL_TOLERANCE = 0.01


def group_levels(loads: FloatArray, max_groups: int) -> list[NDArray[np.intp]]:
    """Index arrays of points sharing a load level, in increasing load order.

    Measured loads are often time averages, all distinct but close to the level that
    was held (1.9995 and 1.9997 at level 2): loads within ``LEVEL_TOLERANCE`` of the
    lowest load of their group share it. Past `max_groups` groups the points are
    split into that many equal-count load bins.
    """
    order = np.argsort(loads, kind="stable")
    ordered = loads[order]
    starts = [0]
    for i in range(1, ordered.size):
        if ordered[i] > ordered[starts[-1]] * (1.0 + LEVEL_TOLERANCE):
            starts.append(i)
    if len(starts) <= max_groups:
        return list(np.split(order, starts[1:]))
    return [chunk for chunk in np.array_split(order, max_groups)]


@dataclass(frozen=True)
class FitData:
    """Validated points, plus robust per-level medians.

    Starting guesses are fitted to the medians. `typical` holds, for each point,
    the median speed of its level: residuals are divided by it rather than by the
    point's own speed, so that a wild point pulls equally hard whichever way it errs.
    """

    loads: FloatArray
    speeds: FloatArray
    typical: FloatArray
    level_loads: FloatArray
    level_speeds: FloatArray
    n_levels: int

    @property
    def span(self) -> float:
        return float(self.level_loads[-1] - self.level_loads[0])


def prepare(loads: ArrayLike, speeds: ArrayLike, *, min_points: int = 2) -> FitData:
    """Validate data for fitting; raise FitError when it cannot support a fit."""
    x, y = as_points(loads, speeds, error=FitError)
    if x.size < min_points:
        raise FitError(f"need at least {min_points} points to fit, got {x.size}")
    n_levels = int(np.unique(x).size)
    if n_levels < 2:
        raise FitError(f"need at least 2 distinct load levels to fit, got only L={x[0]:g}")
    groups = group_levels(x, max_groups=32)
    level_loads = np.array([np.median(x[g]) for g in groups])
    level_speeds = np.array([np.median(y[g]) for g in groups])
    typical = np.empty_like(y)
    for group, speed in zip(groups, level_speeds, strict=True):
        typical[group] = speed
    return FitData(x, y, typical, level_loads, level_speeds, n_levels)
