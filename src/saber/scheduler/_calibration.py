"""What finished requests teach about the speed model: its scale, its spread, and a floor.

Each finished request compares the tokens it made with what the token clock (the
integral of the raw f(L) over its run) predicted. The ratio's moving average scales
f(L) (``value``); the spread of its logarithm around that average is how far one
request's speed strays from the prediction (``sigma``), which the chance of finishing
in time is computed with. The fastest request seen lately bounds the calibrated f(1)
from below: no request runs faster than a lone one, so however slow a busy engine
seemed, an idle one is never predicted slower than what it was seen to deliver.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

ALPHA = 0.1
"""Weight of each finished request in the moving averages: about the last 20 requests
count. Measured: 0.05-0.15 give the same goodput; 0.2 overreacts to a few short
requests under overload (docs/bench.md)."""
LIMITS = (0.1, 10.0)
SIGMA_LIMITS = (0.02, 1.0)
"""The spread is kept within these: a few identical requests must not make the model
certain, and a burst of outliers must not make every chance a coin toss."""
SIGMA_PRIOR = 0.15
"""The spread (of log speed) before anything finished, when the profile gives no error
of its own: the relative error of the shipped profiles' fits is 5-15%."""
FASTEST_WINDOW = 64
"""Finished requests whose speed bounds f(1) from below."""
FASTEST_MIN_TOKENS = 8
"""Only answers this long bound it: a shorter one's time is mostly its first token,
and a few tokens timed over a tick of the clock say nothing of the speed."""
MIN_TOKENS = 2
"""An answer of one token teaches the speed model nothing: it is its first token, so its
time is its prompt's prefill, with nothing decoded. In front of genuine vLLM, 40 of them
to 600-token prompts (a client counting its prompts' tokens) took the scale from 1 to
0.19, and two long answers sent together then ran one after the other. Longer answers
all count: their prefill is in f(L), which is a speed over whole requests."""
OBSERVATIONS = 4096


@dataclass(frozen=True, slots=True)
class Observation:
    """A finished request as the speed model sees it: its time-averaged load, its
    speed (tokens over time since admission), and what the curve in use expected of
    it: ``expected`` is the curve's mean over the loads the request ran at, and
    ``predicted`` the same, calibrated. Not f of the mean load: under a load that
    moves during a request, that is biased (f is convex), by 20-45% on llama.cpp
    overloaded, where the curve's mean was right within 4%."""

    at: float
    load: float
    speed: float
    expected: float
    predicted: float


class Calibration:
    """Observed over predicted speed, learned from every finished request.

    ``value`` scales f(L) when ``enabled``; ``sigma`` and the floor are kept either way
    (they describe the engine, whichever policy uses them)."""

    def __init__(self, *, enabled: bool, sigma: float | None = None) -> None:
        self.enabled = enabled
        self.value = 1.0
        prior = SIGMA_PRIOR if sigma is None else sigma
        self._var = _clamp(prior, SIGMA_LIMITS) ** 2
        self._fastest: deque[float] = deque(maxlen=FASTEST_WINDOW)
        self.observations: deque[Observation] = deque(maxlen=OBSERVATIONS)

    @property
    def sigma(self) -> float:
        """The spread of one request's log speed around the calibrated prediction."""
        return _clamp(math.sqrt(self._var), SIGMA_LIMITS)

    def restart(self) -> None:
        """A new speed model: its scale is learned afresh (the spread and the fastest
        speeds seen describe the engine, not the model, and are kept)."""
        self.value = 1.0

    def set(self, value: float) -> None:
        self.value = _clamp(float(value), LIMITS)

    @property
    def fastest(self) -> float:
        """The fastest request seen lately (tokens/s): a lone request is at least as fast."""
        return max(self._fastest, default=0.0)

    def learn(self, *, at: float, load: float, speed: float, expected: float, tokens: int) -> None:
        """A request of ``tokens`` ran at ``speed`` where the raw curve expected
        ``expected`` over the loads it ran at (time-averaged ``load``)."""
        if tokens < MIN_TOKENS or not (0.0 < speed < math.inf and 0.0 < expected < math.inf):
            return
        self.observations.append(Observation(at, load, speed, expected, self.value * expected))
        if tokens >= FASTEST_MIN_TOKENS:
            self._fastest.append(speed)
        sample = _clamp(speed / expected, LIMITS)
        miss = math.log(sample / self.value) if self.enabled else math.log(sample)
        self._var += ALPHA * (miss * miss - self._var)
        if self.enabled:
            self.value = _clamp(self.value + ALPHA * (sample - self.value), LIMITS)


def _clamp(x: float, limits: tuple[float, float]) -> float:
    low, high = limits
    return min(max(x, low), high)
