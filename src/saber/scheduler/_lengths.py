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

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from saber.config import TaskType

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


def _bucket(tokens: float) -> int:
    if tokens <= 1:
        return 0
    i = int(math.log2(tokens) * BUCKETS_PER_DOUBLING)
    return min(i, len(_MID) - 1)


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

    def _prior(self, mean: float) -> None:
        sigma2 = math.log1p(PRIOR_CV**2)
        mu = math.log(max(mean, 1.0)) - sigma2 / 2
        z = (np.log(_MID) - mu) / math.sqrt(sigma2)
        density = np.exp(-0.5 * z * z)
        self.weights += PRIOR_WEIGHT * density / density.sum()

    def observe(self, tokens: int) -> None:
        """A finished request generated ``tokens``."""
        self._scale /= self._decay
        self.weights[_bucket(tokens)] += self._scale
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
        start = _bucket(produced + 1)
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
        start = np.searchsorted(_EDGES[1:], produced + 1, side="right")  # _bucket(p + 1)
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


class TaskLengths:
    """What the scheduler expects each task type's answers to be.

    With ``learn`` off it is the paper's set-up: every request of a task is
    expected to generate the task's configured length (bounded by its cap).
    """

    def __init__(self, tasks: Iterable[TaskType] = (), *, learn: bool = False) -> None:
        self.learn = learn
        self._tasks = {t.name: t for t in tasks}
        self._est: dict[str, LengthEstimate] = {}
        if learn:
            self._est = {name: LengthEstimate(t.expected_tokens) for name, t in self._tasks.items()}

    def add(self, task: TaskType) -> None:
        """A task type (new, or changed by a reload: its learned lengths are kept)."""
        self._tasks[task.name] = task
        if self.learn and task.name not in self._est:
            self._est[task.name] = LengthEstimate(task.expected_tokens)

    def expected(self, task: TaskType, cap: int | None, floor: int = 0) -> int:
        """Tokens a new request of ``task`` is expected to generate."""
        est = self._est.get(task.name)
        if est is None:
            tokens = (
                task.expected_tokens if cap is None or cap <= 0 else min(cap, task.expected_tokens)
            )
            return max(tokens, floor, 1)
        return max(round(est.mean(cap if cap else None, floor)), 1)

    def remaining(self, task: str, produced: int, cap: int | None, tokens: int) -> float:
        """Tokens a running request that has produced ``produced`` still has to make.

        Without learning, the rest of its expected ``tokens``, at least one."""
        est = self._est.get(task)
        if est is None:
            return max(tokens - produced, 1.0)
        return est.remaining(produced, cap)

    @property
    def version(self) -> int:
        """Moves whenever any task's learned lengths change."""
        return sum(e.version for e in self._est.values())

    def estimate(self, task: str) -> LengthEstimate | None:
        """The task's learned lengths; None when lengths are not learned."""
        return self._est.get(task)

    def observe(self, task: str, tokens: int) -> None:
        est = self._est.get(task)
        if est is not None and tokens > 0:
            est.observe(tokens)

    def summary(self) -> dict[str, dict[str, Any]]:
        return {name: est.summary() for name, est in self._est.items()}

    def state(self) -> dict[str, Any]:
        return {name: est.state() for name, est in self._est.items()}

    def restore(self, state: Mapping[str, Any]) -> list[str]:
        """Load a saved state; returns the tasks restored (unknown ones are skipped)."""
        done = []
        for name, saved in state.items():
            est = self._est.get(name)
            if est is not None:
                est.restore(saved)
                done.append(name)
        return done
