"""The chance that a request finishes in time, from its task's length distribution.

A request of ``n`` tokens at a per-request speed ``v`` finishes within ``T`` seconds
when ``n <= v * T``. Neither is known: ``n`` follows the task's learned length
distribution (clipped to the client's ``max_tokens`` and raised to its
``min_tokens``), and the speed the engine delivers strays from the calibrated
prediction ``v`` by a lognormal factor whose spread the calibration measures
(``sigma``). So P(in time) = P(n / e <= v * T) = G(v * T), with G the distribution of
the *effective length* n / e; G depends on the request's kind (task, cap, floor),
not on its deadline or on the load. Every decision on a waiting request is then a
comparison of v * T with a quantile of G (``Needs.tokens``): admit while P clears a
threshold at f(L + 1), demote once P at f(1) falls below another, refuse once even
f(1) leaves no real chance before ``useful_s``. Cheap: one quantile per kind and
threshold, cached until the distribution or the spread moves.

For a running request, the length is conditioned on what it has already made
(``running_chance``).
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left
from collections.abc import Hashable

import numpy as np

from saber.scheduler.lengths._histogram import BUCKETS_PER_DOUBLING, LengthEstimate

_STEP = 0.5
"""Grid step of the effective-length distribution, in length buckets (about 4.4%)."""
_BUCKET_LOG = math.log(2.0) / BUCKETS_PER_DOUBLING  # natural-log width of one bucket
QUADRATURE = ((-math.sqrt(3.0), 1.0 / 6.0), (0.0, 2.0 / 3.0), (math.sqrt(3.0), 1.0 / 6.0))
"""Three-point Gauss-Hermite nodes and weights for E[g(Z)], Z standard normal."""
SIGMA_STEP = 0.01
"""The spread is rounded to this before a distribution is built."""


def _units(tokens: float) -> float:
    """Tokens as a position on the length buckets' log scale."""
    return math.log2(max(tokens, 1.0)) * BUCKETS_PER_DOUBLING


@functools.cache
def _bucket_index(n: int) -> np.ndarray:
    """Each length bucket's grid index (its middle on the log scale; the first bucket
    holds lengths of 1)."""
    atoms = np.arange(n) + 0.5
    atoms[0] = 0.0
    index: np.ndarray = np.rint(atoms / _STEP).astype(np.int64)
    return index


@functools.cache
def _kernel(spread: float, pad: int) -> np.ndarray:
    """The speed's noise on the grid: a normal of ``spread`` steps, ``pad`` - 1 each side."""
    k = np.arange(-pad + 1, pad)
    kernel = np.exp(-0.5 * (k / spread) ** 2)
    out: np.ndarray = kernel / kernel.sum()
    return out


class _Effective:
    """The distribution of n / e for one kind of request: a CDF on a log grid, kept as a
    list (a lookup is a binary search; numpy's per-call cost was most of one)."""

    __slots__ = ("cdf", "start")

    def __init__(
        self,
        est: LengthEstimate | None,
        exact: int | None,
        cap: int | None,
        floor: int,
        sigma: float,
    ) -> None:
        spread = sigma / _BUCKET_LOG / _STEP  # the noise's std, in grid steps
        pad = math.ceil(4.0 * spread) + 2
        if est is None or exact is not None:
            atoms = np.array([_units(float(exact or 1))])
            if cap is not None:
                atoms = np.minimum(atoms, _units(cap))
            if floor:
                atoms = np.maximum(atoms, _units(floor))
            index = np.rint(atoms / _STEP).astype(np.int64)
            weights = np.ones(1)
        else:  # rint is monotone: clipping the grid's indices is clipping the atoms
            index = _bucket_index(len(est.weights))
            if cap is not None:
                index = np.minimum(index, round(_units(cap) / _STEP))
            if floor:
                index = np.maximum(index, round(_units(floor) / _STEP))
            weights = est.weights / est.weights.sum()
        low, high = int(index.min()) - pad, int(index.max()) + pad
        mass = np.bincount(index - low, weights=weights, minlength=high - low + 1)
        if spread > 0.05:
            mass = np.convolve(mass, _kernel(spread, pad), mode="same")
        cdf = mass.cumsum()
        self.cdf: list[float] = (cdf / cdf[-1]).tolist()
        self.start = low  # grid index of cdf[0]

    def quantile(self, p: float) -> float:
        """The effective length below which it falls with chance ``p``, in tokens."""
        cdf = self.cdf
        i = bisect_left(cdf, p)
        if i <= 0:
            pos = 0.0
        elif i >= len(cdf):
            pos = float(len(cdf) - 1)
        else:
            lo, hi = cdf[i - 1], cdf[i]
            pos = i - 1 + ((p - lo) / (hi - lo) if hi > lo else 1.0)
        # cdf[i] is the mass at or below grid point start + i.
        units = (self.start + pos) * _STEP
        return float(2.0 ** (units / BUCKETS_PER_DOUBLING))

    def chance(self, tokens: float) -> float:
        """P(effective length <= tokens)."""
        pos = _units(tokens) / _STEP - self.start
        cdf = self.cdf
        if pos < 0.0:
            return 0.0
        last = len(cdf) - 1
        if pos >= last:
            return 1.0 if pos > last else cdf[last]
        i = int(pos)
        return (cdf[i + 1] - cdf[i]) * (pos - i) + cdf[i]  # as np.interp computes it


Kind = tuple[str, int, "int | None", int, bool, object, float, object]
"""``SchedRequest.kind``: task, expected tokens, cap, floor, whether tokens is exact, and
the distribution its length follows (the task's, or a conditioned one), its prefill."""


def rounded_sigma(sigma: float) -> float:
    """The spread as distributions are built with: rounded to SIGMA_STEP, so one that
    moves a little at every finished request does not rebuild every cached quantile."""
    return round(sigma / SIGMA_STEP) * SIGMA_STEP


class Needs:
    """Quantiles and chances of the effective length per kind of request, cached until
    the kind's length distribution or the (rounded) spread changes. Kinds that differ
    only in their prefill or their SLO share one distribution. At most CACHED of each are kept (a
    gateway that sees many kinds, such as many exact lengths, starts afresh)."""

    CACHED = 4096

    def __init__(self) -> None:
        self._dists: dict[Hashable, tuple[int, float, _Effective]] = {}
        self._quantiles: dict[tuple[Hashable, float], tuple[int, float, float]] = {}

    def _dist(self, kind: Kind, est: LengthEstimate | None, sigma: float) -> _Effective:
        version = _version(kind, est)
        key = _shared(kind)
        hit = self._dists.get(key)
        if hit is not None and hit[0] == version and hit[1] == sigma:
            return hit[2]
        _, tokens, cap, floor, exact, _, _, _ = kind
        known = tokens if exact or est is None else None  # a certain length
        dist = _Effective(None if known else est, known, cap, floor, sigma)
        if len(self._dists) >= self.CACHED:
            self._dists.clear()
        self._dists[key] = (version, sigma, dist)
        return dist

    def tokens(self, kind: Kind, est: LengthEstimate | None, p: float, sigma: float) -> float:
        """The work (tokens, in units of the predicted speed x time) a request of this
        kind needs to finish with chance ``p``; ``sigma`` rounded (``rounded_sigma``)."""
        version = _version(kind, est)
        key = (_shared(kind), p)
        hit = self._quantiles.get(key)
        if hit is not None and hit[0] == version and hit[1] == sigma:
            return hit[2]
        value = self._dist(kind, est, sigma).quantile(p)
        if len(self._quantiles) >= 4 * self.CACHED:
            self._quantiles.clear()
        self._quantiles[key] = (version, sigma, value)
        return value

    def chance(self, kind: Kind, est: LengthEstimate | None, budget: float, sigma: float) -> float:
        """P(in time) for a request of this kind given ``budget`` = speed x time left."""
        if budget <= 0:
            return 0.0
        return self._dist(kind, est, sigma).chance(budget)

    def forget(self) -> None:
        self._dists.clear()
        self._quantiles.clear()


def _version(kind: Kind, est: LengthEstimate | None) -> int:
    """The version of what a kind's distribution is built from: -1 for an exact length,
    which no distribution moves (each finish teaches its task a new version: a queue of
    ignore_eos requests would rebuild them all at every one)."""
    return -1 if est is None or kind[4] else est.version


def _shared(kind: Kind) -> Hashable:
    """What of a kind its length's distribution depends on: not its prefill nor its SLO."""
    return kind[:6]


def running_chance(
    est: LengthEstimate | None,
    produced: np.ndarray,
    limit: np.ndarray,
    budget: np.ndarray,
    sigma: float,
    expected: np.ndarray | None = None,
) -> np.ndarray:
    """P(what is left of each running request is made within its ``budget`` (speed x
    time left)), elementwise: its length conditioned on the ``produced`` tokens it has
    made, at most ``limit`` (its cap), with the speed's spread ``sigma``. Without a
    distribution (``est`` None) the remainder ``expected`` is taken as certain, and the
    chance is that of the speed alone: exactly the normal's, not a quadrature's steps.
    ``budget`` may hold a row per speed (shape (k, n)): each row is judged alike."""
    if est is None:
        assert expected is not None
        rest = np.minimum(expected, np.maximum(limit - produced, 0.0))
        with np.errstate(divide="ignore"):
            z = np.log(np.maximum(budget, 1e-300) / np.maximum(rest, 1e-9)) / max(sigma, 1e-6)
        out = np.where(rest <= 0.0, 1.0, normal_cdf(z))
        return np.where(budget > 0, out, 0.0)
    out = np.zeros_like(budget, dtype=float)
    before = est.cdf(produced)
    alive = 1.0 - before
    live = alive > 1e-12
    alive = np.where(live, alive, 1.0)
    for z, w in QUADRATURE:
        reach = produced + budget * math.exp(sigma * z)
        done = np.where(live, (est.cdf(reach) - before) / alive, 1.0)
        out += w * np.where(reach >= limit, 1.0, done)
    return np.where(budget > 0, out, 0.0)


def normal_cdf_scalar(z: float) -> float:
    """The standard normal's CDF at one point."""
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """The standard normal's CDF, elementwise (Abramowitz and Stegun 7.1.26: within
    1.5e-7), without scipy on the hot path."""
    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = 1.0 - poly * np.exp(-x * x)
    out: np.ndarray = 0.5 * (1.0 + np.sign(z) * erf)
    return out
