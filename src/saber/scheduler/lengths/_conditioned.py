"""Answer lengths conditioned on what a request carries, learned online, used only where
they predict better than the task's own distribution.

A request carries, at arrival, its prompt's size (tokens, or bytes turned into tokens:
``saber.scheduler.lengths._prompt_size``) and, where requests repeat, a fingerprint (its
system prompt, or the template it shares with others). Per task, each way of reading
them (a *conditioning*) predicts the answer's length as a distribution:

- ``slope:b``: the answer follows the prompt's size to the power ``b`` (a translation's
  answer is about as long as its input: ``b`` = 1). Learned as the distribution of
  log(answer) - b log(prompt), shifted by each prompt's size;
- ``size``: one distribution per band of prompt sizes (half a doubling wide), for a
  relation that is not a power;
- ``fingerprint`` / ``exact``: one per fingerprint, or per exact prompt size in bytes (a
  template repeats its size): the last answers of that key.

Each is shrunk toward the task's distribution in proportion to how little it has seen
(``SHRINK`` answers' worth of the task's). Every finished answer first scores each
conditioning against the task's distribution (the log of the probability each gave its
length: a held-out score, since the answer has not been learned yet), then teaches
them all. A conditioning is used only once its score, a decaying sum of those log
ratios, passes ``GATE``: traffic whose lengths carry no signal (the Azure code trace:
answer and prompt sizes independent) never passes it, and is decided exactly as by the
task's distribution alone.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from saber.scheduler.lengths._histogram import (
    BUCKETS_PER_DOUBLING,
    LengthEstimate,
    bucket,
    n_buckets,
)

SHRINK = 4.0
"""A conditioned distribution holds this many answers' worth of the task's own: one
with few answers of its own is mostly the task's."""
GATE = 3.0
"""The score (nats of held-out log likelihood over the task's distribution) a
conditioning must pass to be used: evidence of about 20 to 1."""
Z = 3.5
"""And its score must be this many times the root of the sum of its terms' squares: a
score made of a few lucky answers is noise, one made of many small gains a signal."""
BAND = 2
"""An answer is scored by the probability each gave the buckets within this many of its
own (about 18% either way): what decisions tell apart, not a bucket's luck."""
SCORE_HALF_LIFE = 200.0
"""Answers after which a score's term counts half: a signal that fades is dropped."""
HALF_LIFE = 500.0
"""As the task's own lengths (``saber.scheduler.lengths._histogram.HALF_LIFE``)."""
SLOPES = (0.5, 1.0)
SHIFT_STEP = 2
"""Shifts of ``slope`` are rounded to this many length buckets (about 18%): requests
whose prompts differ by less share a distribution (one kind of request)."""
SIZE_BAND = BUCKETS_PER_DOUBLING // 2
"""Length buckets per band of ``size``: half a doubling."""
KEY_MEMORY = 32
KEY_MIN = 2
"""A key's last KEY_MEMORY answers are its own; with fewer than KEY_MIN it is not
used (the next best conditioning is)."""
KEYS_MAX = 512
"""Keys remembered per task and conditioning, the least recently seen forgotten."""
REFRESH = 0.05
"""A conditioned distribution is rebuilt once what it was built from has grown by this
share (or by one answer, while it has few): its kinds' cached quantiles then stay
valid for several answers, as the task's do for one."""

_N = n_buckets()
Key = Hashable


@dataclass(frozen=True, slots=True)
class Carried:
    """What a request carries that its answer's length may follow, as the scheduler is
    told it at arrival: its prompt's size in tokens (estimated from bytes unless known),
    its prompt's size in bytes, and a fingerprint of what it shares with others."""

    prompt_tokens: float | None = None
    prompt_bytes: int | None = None
    fingerprint: str | None = None


NOTHING = Carried()


def _units(tokens: float) -> float:
    return math.log2(max(tokens, 1.0)) * BUCKETS_PER_DOUBLING


class _Decayed:
    """A decaying histogram over length buckets (offset by ``offset``), with its count."""

    __slots__ = ("_decay", "_scale", "count", "version", "weights")

    def __init__(self, size: int, half_life: float) -> None:
        self.weights = np.zeros(size)
        self._decay = 0.5 ** (1.0 / half_life)
        self._scale = 1.0
        self.count = 0.0  # decayed number of answers
        self.version = 0

    def add(self, index: int) -> None:
        self._scale /= self._decay
        self.weights[index] += self._scale
        self.count = self.count * self._decay + 1.0
        self.version += 1
        if self._scale > 1e12:
            self.weights /= self._scale
            self._scale = 1.0


class Conditioning:
    """One way of reading what a request carries into a distribution of its answer's
    length. Subclasses say which key a request has and what each key has seen."""

    name = ""

    def key(self, carried: Carried) -> Key | None:
        """The request's key; None when it carries nothing this reads."""
        raise NotImplementedError

    def seen(self, key: Key) -> tuple[np.ndarray, float, int] | None:
        """What ``key`` has seen: weights over the length buckets (any scale), how many
        answers they stand for, and a version that moves with them; None: too little
        to use."""
        raise NotImplementedError

    def share(self, key: Key, lo: int, hi: int) -> tuple[float, float] | None:
        """The share of what ``key`` has seen in buckets ``lo``..``hi``, and how many
        answers that stands for; None as for ``seen``."""
        seen = self.seen(key)
        if seen is None:
            return None
        weights, count, _ = seen
        return _mass(weights, lo, hi), count

    def learn(self, key: Key, index: int) -> None:
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        return {}

    def restore(self, state: dict[str, Any]) -> None:
        return None


class Slope(Conditioning):
    """log(answer) = b log(prompt) + a residual whose distribution is learned."""

    def __init__(self, b: float) -> None:
        self.b = b
        self.name = f"slope:{b:g}"
        self._residual = _Decayed(2 * _N, HALF_LIFE)  # index: bucket - shift + _N

    def key(self, carried: Carried) -> Key | None:
        if carried.prompt_tokens is None:
            return None
        return SHIFT_STEP * round(self.b * _units(carried.prompt_tokens) / SHIFT_STEP)

    def seen(self, key: Key) -> tuple[np.ndarray, float, int] | None:
        res = self._residual
        if res.count <= 0:
            return None
        assert isinstance(key, int)
        start = _N - key  # the residual index of length bucket 0
        lo, hi = max(start, 0), min(start + _N, 2 * _N)
        out = np.zeros(_N)
        out[lo - start : hi - start] = res.weights[lo:hi]
        out[0] += res.weights[:lo].sum()  # answers shorter than one bucket: the first
        out[-1] += res.weights[hi:].sum()
        return out, res.count, res.version

    def share(self, key: Key, lo: int, hi: int) -> tuple[float, float] | None:
        res = self._residual
        total = float(res.weights.sum())
        if res.count <= 0 or total <= 0:
            return None
        assert isinstance(key, int)
        # Residual indices of the buckets; the first and the last take all beyond them.
        start = 0 if lo <= 0 else lo - key + _N
        end = 2 * _N if hi >= _N - 1 else hi - key + _N + 1
        part = float(res.weights[max(start, 0) : max(min(end, 2 * _N), 0)].sum())
        return part / total, res.count

    def learn(self, key: Key, index: int) -> None:
        assert isinstance(key, int)
        self._residual.add(min(max(index - key + _N, 0), 2 * _N - 1))

    def state(self) -> dict[str, Any]:
        res = self._residual
        return {"weights": (res.weights / res._scale).tolist(), "count": res.count}

    def restore(self, state: dict[str, Any]) -> None:
        self._residual.weights = np.asarray(state["weights"], dtype=float)
        self._residual._scale = 1.0
        self._residual.count = float(state["count"])
        self._residual.version += 1


class Plain(Slope):
    """The task's own answers, learned as every conditioning learns (no prior): what a
    conditioning must beat. The task's distribution itself starts from a configured
    prior, which a conditioning that learns from the answers alone would beat wherever
    the prior is wrong, signal or none."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.name = "plain"

    def key(self, carried: Carried) -> Key | None:
        return 0


class Bands(Conditioning):
    """One distribution per band of prompt sizes."""

    name = "size"

    def __init__(self) -> None:
        self._bands: dict[int, _Decayed] = {}

    def key(self, carried: Carried) -> Key | None:
        if carried.prompt_tokens is None:
            return None
        return int(_units(carried.prompt_tokens) // SIZE_BAND)

    def seen(self, key: Key) -> tuple[np.ndarray, float, int] | None:
        band = self._bands.get(key)  # type: ignore[call-overload]
        if band is None or band.count <= 0:
            return None
        return band.weights, band.count, band.version

    def learn(self, key: Key, index: int) -> None:
        assert isinstance(key, int)
        band = self._bands.get(key)
        if band is None:
            band = self._bands[key] = _Decayed(_N, HALF_LIFE)
        band.add(index)


class Keys(Conditioning):
    """The last answers of each key: a fingerprint, or an exact prompt size in bytes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._keys: OrderedDict[Key, tuple[deque[int], list[int]]] = OrderedDict()

    def key(self, carried: Carried) -> Key | None:
        if self.name == "fingerprint":
            return carried.fingerprint
        return carried.prompt_bytes

    def seen(self, key: Key) -> tuple[np.ndarray, float, int] | None:
        hit = self._keys.get(key)
        if hit is None or len(hit[0]) < KEY_MIN:
            return None
        answers, version = hit
        weights = np.bincount(np.fromiter(answers, dtype=np.int64), minlength=_N)
        return weights.astype(float), float(len(answers)), version[0]

    def share(self, key: Key, lo: int, hi: int) -> tuple[float, float] | None:
        hit = self._keys.get(key)
        if hit is None or len(hit[0]) < KEY_MIN:
            return None
        answers = hit[0]
        part = sum(1 for a in answers if lo <= a <= hi)
        return part / len(answers), float(len(answers))

    def learn(self, key: Key, index: int) -> None:
        hit = self._keys.get(key)
        if hit is None:
            hit = self._keys[key] = (deque(maxlen=KEY_MEMORY), [0])
            if len(self._keys) > KEYS_MAX:
                self._keys.popitem(last=False)
        else:
            self._keys.move_to_end(key)
        hit[0].append(index)
        hit[1][0] += 1


def conditionings() -> list[Conditioning]:
    """Every conditioning a task tries, in the order that breaks ties."""
    return [
        *(Slope(b) for b in SLOPES),
        Bands(),
        Keys("fingerprint"),
        Keys("exact"),
    ]


class Conditioned:
    """One task's conditionings, their scores against the task's distribution, and the
    distributions they give (``LengthEstimate``, cached per key)."""

    def __init__(self, base: LengthEstimate) -> None:
        self.base = base
        self.ways = conditionings()
        self.plain = Plain()
        self.scores = np.zeros(len(self.ways))
        self.squares = np.zeros(len(self.ways))  # of each answer's term, for its error
        self._score_decay = 0.5 ** (1.0 / SCORE_HALF_LIFE)
        self.active: int | None = None  # index of the conditioning in use
        self._built: dict[tuple[int, Key], tuple[int, LengthEstimate]] = {}

    def pick(self, carried: Carried) -> tuple[int, Key] | None:
        """The conditioning in use and the request's key, if it reads this request and
        its key has seen enough; else None (the task's distribution)."""
        if self.active is None:
            return None
        way = self.ways[self.active]
        key = way.key(carried)
        if key is None or way.seen(key) is None:
            return None
        return self.active, key

    def estimate(self, which: tuple[int, Key]) -> LengthEstimate:
        """The distribution a conditioning gives a key, shrunk toward the task's; rebuilt
        once the key has seen REFRESH more answers (at least one) since it was built."""
        i, key = which
        seen = self.ways[i].seen(key)
        hit = self._built.get(which)
        if seen is None:  # forgotten since (a key pushed out): the last one built
            return hit[1] if hit is not None else self.base
        weights, count, version = seen
        if hit is not None and version - hit[0] < max(1.0, REFRESH * count):
            return hit[1]
        est = LengthEstimate.of(_shrunk(weights, count, self.base.weights))
        if len(self._built) > 4 * KEYS_MAX:
            self._built.clear()
        self._built[which] = (version, est)
        return est

    def observe(self, tokens: int, cap: int | None, carried: Carried) -> None:
        """A finished answer of ``tokens``: scored by each conditioning (before any
        learns it), then learned by each. ``cap``: the answer was cut at it if it
        reached it, so it scores as that length or longer."""
        index = bucket(tokens)
        lo = index - BAND
        hi = _N - 1 if cap is not None and tokens >= cap else index + BAND
        p0 = max(_mass(self.base.weights, lo, hi), 1e-9)
        ref = _predicted(self.plain, 0, lo, hi, p0)
        self.scores *= self._score_decay
        self.squares *= self._score_decay
        for i, way in enumerate(self.ways):
            key = way.key(carried)
            if key is None:
                continue
            gain = math.log(_predicted(way, key, lo, hi, p0) / ref)
            self.scores[i] += gain
            self.squares[i] += gain * gain
            way.learn(key, index)
        self.plain.learn(0, index)
        self.active = self._passing()

    def _passing(self) -> int | None:
        """The conditioning whose score is highest, if it passes the gate: GATE nats
        ahead, and Z standard errors (a few lucky answers do not make a signal)."""
        best = int(np.argmax(self.scores))
        score = float(self.scores[best])
        if score > GATE and score > Z * math.sqrt(float(self.squares[best])):
            return best
        return None

    def summary(self) -> dict[str, Any]:
        return {
            "conditioning": None if self.active is None else self.ways[self.active].name,
            "scores": {
                w.name: round(float(s), 2) for w, s in zip(self.ways, self.scores, strict=True)
            },
        }

    def state(self) -> dict[str, Any]:
        return {
            "plain": self.plain.state(),
            "scores": self.scores.tolist(),
            "squares": self.squares.tolist(),
            "ways": {w.name: w.state() for w in self.ways},
        }

    def restore(self, state: dict[str, Any]) -> None:
        scores = np.asarray(state.get("scores", []), dtype=float)
        squares = np.asarray(state.get("squares", []), dtype=float)
        shape = self.scores.shape
        if scores.shape == squares.shape == shape and np.all(np.isfinite(scores + squares)):
            self.scores, self.squares = scores, squares
        if state.get("plain"):
            self.plain.restore(state["plain"])
        for way in self.ways:
            saved = state.get("ways", {}).get(way.name)
            if saved:
                way.restore(saved)
        self.active = self._passing()


def _predicted(way: Conditioning, key: Key, lo: int, hi: int, p0: float) -> float:
    """The probability ``way`` gave buckets ``lo``..``hi`` for ``key``, shrunk toward the
    task's ``p0`` (``p0`` itself where it has seen too little)."""
    seen = way.share(key, lo, hi)
    if seen is None:
        return p0
    own, count = seen
    return max((count * own + SHRINK * p0) / (count + SHRINK), 1e-9)


def _shrunk(weights: np.ndarray, count: float, base: np.ndarray) -> np.ndarray:
    """``weights`` (``count`` answers) with SHRINK answers of ``base``, summing to 1."""
    own = weights / weights.sum()
    out: np.ndarray = (count * own + SHRINK * base / base.sum()) / (count + SHRINK)
    return out


def _mass(weights: np.ndarray, lo: int, hi: int) -> float:
    """The probability ``weights`` give buckets ``lo``..``hi``."""
    total = float(weights.sum())
    if total <= 0:
        return 0.0
    return float(weights[max(lo, 0) : hi + 1].sum()) / total
