"""Arrival processes: Poisson (the paper's) and gamma with a chosen CV (bursty)."""

from __future__ import annotations

import numpy as np


def poisson_arrivals(rng: np.random.Generator, rps: float, n: int) -> np.ndarray:
    if rps <= 0 or n < 0:
        raise ValueError("rps must be > 0 and n >= 0")
    return np.cumsum(rng.exponential(1.0 / rps, n))


def gamma_arrivals(rng: np.random.Generator, rps: float, n: int, cv: float) -> np.ndarray:
    """Inter-arrival times with mean 1/rps and the given CV; CV 1 is Poisson, > 1 bursty."""
    if rps <= 0 or cv <= 0 or n < 0:
        raise ValueError("rps and cv must be > 0 and n >= 0")
    shape = 1.0 / (cv * cv)
    return np.cumsum(rng.gamma(shape, 1.0 / (rps * shape), n))
