"""When running requests end: the chance that one, or several, have freed their slots
by each time, from what each has made, its pace and its kind's learned lengths.

What the gateway's Retry-After says (``Bookkeeping.time_to_free``); nothing here
decides an admission.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from saber.scheduler.lengths._histogram import LengthEstimate

FREE_GRID = np.concatenate(([0.0], np.geomspace(0.005, 3600.0, 160)))
"""The times (s) at which the chance that slots have freed is weighed: 9% apart."""
COUNTED = 128
"""Past one slot, the requests counted: those expected to end soonest. Leaving the
others out can only put the time later, the side a retry should err on."""


@dataclass(frozen=True, slots=True)
class Ends:
    """The running requests of one length distribution (None: none learned, each
    expected remainder taken as certain), one row each: tokens made, the cap, the
    pace (tokens/s) and, without a distribution, the tokens left."""

    estimate: LengthEstimate | None
    made: np.ndarray
    cap: np.ndarray
    pace: np.ndarray
    left: np.ndarray

    def certain_end(self) -> np.ndarray:
        """Seconds to each one's end taken as certain: its remainder without a
        distribution, else its cap."""
        if self.estimate is None:
            return np.asarray(self.left / self.pace)
        return np.asarray((self.cap - self.made) / self.pace)

    def alive(self) -> np.ndarray:
        """P(each still runs) at each FREE_GRID time, one row each."""
        made, cap, pace = self.made[:, None], self.cap[:, None], self.pace[:, None]
        if self.estimate is None:
            return np.asarray(self.left[:, None] / pace > FREE_GRID, float)
        return np.asarray(self.estimate.survival(made, cap, FREE_GRID * pace))


def first_free(groups: list[Ends], q: float) -> float:
    """Seconds by which the soonest request has ended with chance ``q``: interpolated
    between grid times, and never past a certain end (a remainder taken as certain, or
    a cap)."""
    certain = min(float(np.min(g.certain_end())) for g in groups)
    alive = np.ones_like(FREE_GRID)  # P(no uncertain one has ended by each grid time)
    for g in groups:
        if g.estimate is not None:
            alive *= np.prod(g.alive(), axis=0)
    crossed = np.flatnonzero(alive <= 1.0 - q)
    if not crossed.size:
        return min(certain, float(FREE_GRID[-1]))
    k = int(crossed[0])
    if k == 0:
        return min(certain, float(FREE_GRID[0]))
    # Linear between the two grid times around the crossing.
    t0, t1, a0, a1 = FREE_GRID[k - 1], FREE_GRID[k], alive[k - 1], alive[k]
    frac = (a0 - (1.0 - q)) / (a0 - a1) if a0 > a1 else 1.0
    return min(certain, float(t0 + frac * (t1 - t0)))


def kth_free(groups: list[Ends], q: float, k: int) -> float:
    """Seconds by which ``k`` requests have ended with chance ``q`` (all of them, if
    fewer run): how many have ended by a time is a sum of independent chances, whose
    distribution below ``k`` is built one request at a time. Counted over the COUNTED
    requests expected to end soonest, and read at the first grid time that reaches
    ``q``, not interpolated: at most one grid step late, never early."""
    alive = np.concatenate([g.alive() for g in groups])
    if len(alive) > COUNTED:  # the expected end within the grid: the area under each row
        ends = np.sum(0.5 * (alive[:, 1:] + alive[:, :-1]) * np.diff(FREE_GRID), axis=1)
        alive = alive[np.argpartition(ends, COUNTED - 1)[:COUNTED]]
    k = min(k, len(alive))
    fewer = np.zeros((k, FREE_GRID.size))  # P(j of those seen so far have ended), j < k
    fewer[0] = 1.0
    for row in alive:
        fewer[1:] = fewer[1:] * row + fewer[:-1] * (1.0 - row)
        fewer[0] *= row
    crossed = np.flatnonzero(fewer.sum(axis=0) <= 1.0 - q)
    return float(FREE_GRID[crossed[0]] if crossed.size else FREE_GRID[-1])
