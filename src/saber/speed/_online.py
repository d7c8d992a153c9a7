"""Keeping f(L) true while serving: a sliding window of what the engine delivers.

Every finished request gives a point (its time-averaged load, its speed). ``LiveFit``
keeps the last ``window`` of them, refits the model kind in use with the very fitter
the offline profile used, and says whether the live curve has departed from the one
in use by more than ``margin`` over the loads actually seen. The fit itself is the
expensive part (tens of milliseconds): the gateway runs it off its event loop, the
simulator inline. Nothing here has a clock; callers pass what they observed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from saber.speed._base import SpeedModel
from saber.speed._errors import FitError
from saber.speed._registry import fit_model

WINDOW = 2000
MIN_POINTS = 200
MIN_LEVELS = 3
LEVEL_POINTS = 5
EVERY = 200
MARGIN = 0.15
"""The live curve replaces the one in use when they differ by more than this
(relative), somewhere within the loads seen."""
MIN_SPAN = 2.0
"""The loads seen must span this ratio (95th over 5th percentile) for a refit: a
curve fitted on a narrow band of loads is a guess everywhere else (calibration,
which scales the curve in use, is what follows the engine there)."""
MAX_BEND = 4.0
"""Below the loads seen, a refitted curve is an extrapolation: one whose ratio to the
curve in use moves by more than this factor between there and one request (f(1) a
thousand times the engine's, from points at 40-48 requests) is not kept."""

ANCHOR_ABOVE = 4.0
ANCHOR_SHARE = 0.1
"""Where the loads seen start above ANCHOR_ABOVE requests (their 5th percentile, as
MIN_SPAN reads them), the refit is also given ANCHOR_SHARE of its points at one request,
on the curve in use (fewer, the robust fit takes them for outliers, as it takes one lone
point among 200): a lone request's speed is what such points say least about. Without
it, on joint-W2 at twice the H100's capacity with TTFT and TPOT SLOs, a refit on 200
points at 45 to 133 requests put f(1) at 61 tokens/s where the engine ran 115 alone; the
calibration, one scale for every load, then learned 1.86 from the requests that finished
alone and predicted three times the speed the engine gave at 128 to 256, so everything
was admitted (1.8% met its SLO, vLLM alone 1.7%), and the loads then seen were too
narrow a band for a refit to undo it. On joint-W1 at twice the A100's capacity, 199
points at 17-87 requests and one at 1.75 gave a flat curve, 43 tokens/s at every load
(the engine ran 80 alone), and two of six windows met 3% and 6% where the others met
40-45%."""


@dataclass(frozen=True)
class Refit:
    """The outcome of one refit: the candidate, how far it departs from the curve in
    use over the loads seen, and whether it should replace it."""

    model: SpeedModel
    departure: float
    loads: tuple[float, float]  # the range it was judged on
    points: int
    swap: bool


class LiveFit:
    """A window of (load, speed) points from live traffic, and refits on it."""

    def __init__(
        self,
        *,
        window: int = WINDOW,
        min_points: int = MIN_POINTS,
        every: int = EVERY,
        margin: float = MARGIN,
    ) -> None:
        if min_points < 2 or window < min_points or every < 1 or margin <= 0:
            raise ValueError("need window >= min_points >= 2, every >= 1 and margin > 0")
        self.window = window
        self.min_points = min_points
        self.every = every
        self.margin = margin
        self._points: deque[tuple[float, float]] = deque(maxlen=window)
        self._new = 0
        self.refits = 0
        self.swaps = 0
        self.last: Refit | None = None

    def observe(self, load: float, speed: float) -> None:
        if load >= 1.0 and speed > 0 and np.isfinite(load) and np.isfinite(speed):
            self._points.append((load, speed))
            self._new += 1

    def __len__(self) -> int:
        return len(self._points)

    def levels(self) -> dict[int, int]:
        """Points in the window at each load, rounded to a whole one."""
        loads, counts = np.unique(np.rint([p[0] for p in self._points]), return_counts=True)
        return dict(zip(loads.astype(int).tolist(), counts.tolist(), strict=True))

    def due(self) -> bool:
        """Enough new points since the last refit, on enough distinct loads."""
        if self._new < self.every or len(self._points) < self.min_points:
            return False
        return sum(n >= LEVEL_POINTS for n in self.levels().values()) >= MIN_LEVELS

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """The window's loads and speeds (copies: safe to fit on another thread)."""
        self._new = 0
        pts = np.array(self._points, dtype=float).reshape(-1, 2)
        return pts[:, 0].copy(), pts[:, 1].copy()

    def judge(
        self, current: Callable[[float], float], kind: str, loads: np.ndarray, speeds: np.ndarray
    ) -> Refit | None:
        """Fit ``kind`` to the points and compare it with ``current``; None if the
        points cannot support a fit: too narrow a band of loads, no fit, or a fit that
        bends away from ``current`` below the loads seen. Pure apart from the
        counters."""
        low, high = (float(v) for v in np.percentile(loads, [5, 95]))
        if high < MIN_SPAN * max(low, 1.0):
            return None
        least = max(float(loads.min()), 1.0)
        fitted_loads, fitted_speeds = loads, speeds
        if low > ANCHOR_ABOVE:
            anchors = max(LEVEL_POINTS, round(ANCHOR_SHARE * loads.size))
            fitted_loads = np.concatenate((loads, np.ones(anchors)))
            fitted_speeds = np.concatenate((speeds, np.full(anchors, current(1.0))))
        try:
            model = fit_model(kind, fitted_loads, fitted_speeds)
        except (FitError, ValueError):
            return None
        at_least = model(least) / current(least)
        below = np.linspace(1.0, least, 25)
        if any(not 1 / MAX_BEND <= model(x) / current(x) / at_least <= MAX_BEND for x in below):
            return None
        self.refits += 1
        grid = np.linspace(low, max(high, low + 1e-9), 25)
        departure = max(abs(model(x) / current(x) - 1.0) for x in grid)
        refit = Refit(model, departure, (low, high), len(loads), departure > self.margin)
        if refit.swap:
            self.swaps += 1
        self.last = refit
        return refit
