"""Output lengths learned per task type: a decaying log-bucket histogram.

Clients send ``max_tokens`` as a cap, not a prediction, so the scheduler keeps its
own idea of how long each task's answers are. Every finished request adds its
completion tokens; older observations fade (a half-life counted in requests), so
the estimate follows a change of model, prompts or users. It starts from the
task's configured mean: a lognormal prior worth ``PRIOR_WEIGHT`` requests.

Admission uses the *mean* of min(length, cap) raised to the floor: the
speed model is a processor-sharing one, so the work a request adds is its expected
length. A quantile was measured against it in the benchmark (docs/bench.md): the
median under-admits long answers' cost, the 70th percentile over-reserves.
A running request's remaining work is the expected remainder given what it has
already produced, E[min(L, cap) - t | L > t], which grows for long-tailed tasks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

BUCKETS_PER_DOUBLING = 8
MAX_LENGTH = 1 << 24
PRIOR_CV = 0.6
PRIOR_WEIGHT = 100.0
HALF_LIFE = 500.0
"""Requests after which an observation counts half."""

_EDGES = np.power(2.0, np.arange(0, 24 * BUCKETS_PER_DOUBLING + 1) / BUCKETS_PER_DOUBLING)
_MID = np.sqrt(_EDGES[:-1] * _EDGES[1:])  # geometric centre of each bucket
_MID[0] = 1.0
_LOG_EDGES = np.arange(len(_EDGES), dtype=float)  # log2(edge) * BUCKETS_PER_DOUBLING


_BUILT = itertools.count(1 << 40)


def bucket(tokens: float) -> int:
    """The histogram bucket of a length of ``tokens``."""
    if tokens <= 1:
        return 0
    i = int(math.log2(tokens) * BUCKETS_PER_DOUBLING)
    return min(i, len(_MID) - 1)


def n_buckets() -> int:
    """How many buckets a length histogram has."""
    return len(_MID)


class LengthEstimate:
    """One task's answer lengths: a histogram over log-spaced buckets (about 9%
    wide), each weight decaying by half every ``half_life`` observations."""

    __slots__ = ("_cache", "_cum", "_decay", "_scale", "count", "version", "weights")

    def __init__(self, mean: float, *, half_life: float = HALF_LIFE) -> None:
        self.weights = np.zeros(len(_MID))
        self._decay = 0.5 ** (1.0 / half_life)
        self._scale = 1.0  # weights are stored divided by the decay applied since
        self._cache: dict[tuple[int | None, int], float] = {}
        self._cum: np.ndarray | None = None
        self.count = 0  # observations, undecayed
        self.version = 0  # moves with every change: what others cache from it is stale
        self._prior(mean)

    @classmethod
    def of(cls, weights: np.ndarray) -> LengthEstimate:
        """A fixed distribution over the buckets (``weights``, any scale): what a
        conditioning predicts for one kind of request (``saber.scheduler.lengths._conditioned``)."""
        est = cls.__new__(cls)
        est.weights = np.asarray(weights, dtype=float)
        est._decay = 1.0
        est._scale = 1.0
        est._cache = {}
        est._cum = None
        est.count = 0
        est.version = next(_BUILT)  # another build of one kind's distribution: not the same
        return est

    def _prior(self, mean: float) -> None:
        sigma2 = math.log1p(PRIOR_CV**2)
        mu = math.log(max(mean, 1.0)) - sigma2 / 2
        z = (np.log(_MID) - mu) / math.sqrt(sigma2)
        density = np.exp(-0.5 * z * z)
        self.weights += PRIOR_WEIGHT * density / density.sum()

    def observe(self, tokens: int) -> None:
        """A finished request generated ``tokens``."""
        self._scale /= self._decay
        self.weights[bucket(tokens)] += self._scale
        self.count += 1
        self._changed()
        if self._scale > 1e12:  # renormalise long before floats lose precision
            self.weights /= self._scale
            self._scale = 1.0

    def _changed(self) -> None:
        self._cache.clear()
        self._cum = None
        self.version += 1

    def cdf(self, tokens: np.ndarray) -> np.ndarray:
        """P(L <= tokens), elementwise: linear in log(tokens) within a bucket, so that
        a probability moves smoothly with the time a request has."""
        cum = self._cum
        if cum is None:
            cum = np.concatenate(([0.0], np.cumsum(self.weights)))
            self._cum = cum = cum / cum[-1]
        logs = np.log2(np.maximum(tokens, 1.0)) * BUCKETS_PER_DOUBLING
        shares: np.ndarray = np.interp(logs, _LOG_EDGES, cum)
        return shares

    def mean(self, cap: int | None = None, floor: int = 0) -> float:
        """E[min(max(L, floor), cap)]."""
        key = (cap, floor)
        value = self._cache.get(key)
        if value is None:
            mids = _MID if cap is None else np.minimum(_MID, cap)
            if floor:
                mids = np.maximum(mids, floor)
            value = self._cache[key] = float(np.dot(self.weights, mids) / self.weights.sum())
        return value

    def remaining(self, produced: int, cap: int | None = None) -> float:
        """E[min(L, cap) - produced | L > produced]: the tokens still to come."""
        limit = cap if cap is not None else MAX_LENGTH
        if produced >= limit:
            return 0.0
        start = bucket(produced + 1)
        w = self.weights[start:]
        total = w.sum()
        if total <= 0:  # beyond everything seen: assume it is about to end
            return 1.0
        mids = np.clip(_MID[start:], produced + 1, limit)
        return float(np.dot(w, mids) / total) - produced

    def survival(self, produced: np.ndarray, limit: np.ndarray, more: np.ndarray) -> np.ndarray:
        """P(min(L, limit) - produced > more | L > produced), elementwise: the chance
        that a running request that has made ``produced`` tokens still has more than
        ``more`` to make (the distribution ``remaining`` is the mean of). Arrays
        broadcast; ``limit`` is the cap (MAX_LENGTH for none)."""
        cum = np.concatenate(([0.0], np.cumsum(self.weights)))  # weight of buckets < k
        total = cum[-1]
        start = np.searchsorted(_EDGES[1:], produced + 1, side="right")  # bucket(p + 1)
        start = np.minimum(start, len(_MID) - 1)
        start = np.where(produced + 1 <= 1, 0, start)
        above = total - cum[start]  # weight of L > produced
        # Buckets whose point lies beyond produced + more.
        first = np.maximum(np.searchsorted(_MID, produced + more, side="right"), start)
        beyond = np.where(more < 1, above, total - cum[first])
        with np.errstate(invalid="ignore", divide="ignore"):
            alive = np.where(above > 0, beyond / above, (more < 1).astype(float))
        return np.where(produced + more >= limit, 0.0, alive)

    def quantile(self, q: float) -> float:
        cum = np.cumsum(self.weights)
        i = int(np.searchsorted(cum, q * cum[-1]))
        return float(_MID[min(i, len(_MID) - 1)])

    def summary(self) -> dict[str, Any]:
        return {
            "mean": round(self.mean(), 1),
            "p50": round(self.quantile(0.5), 1),
            "p90": round(self.quantile(0.9), 1),
            "observed": self.count,
        }

    def state(self) -> dict[str, Any]:
        return {"weights": (self.weights / self._scale).tolist(), "count": self.count}

    def restore(self, state: Mapping[str, Any]) -> None:
        weights = np.asarray(state["weights"], dtype=float)
        if weights.shape != self.weights.shape or not np.all(np.isfinite(weights)):
            raise ValueError("a length state of another shape or with bad values")
        if weights.sum() <= 0 or weights.min() < 0:
            raise ValueError("a length state without weight")
        self.weights = weights
        self._scale = 1.0
        self.count = int(state.get("count", 0))
        self._changed()
