"""Token-length distributions per task type.

Lengths are lognormal around Table I's means. LLM prompt and answer lengths are
positive and right-skewed, with a long tail of big requests; a lognormal fits
public traces (ShareGPT, Azure LLM inference) well and has just two knobs: the
mean, which Table I gives, and the coefficient of variation, which it does not.
We use CV 0.6 for outputs and inputs: wide enough that some requests of every
type cannot meet their SLA even alone (so demotion matters), narrow enough that
the means stay representative.
"""

from __future__ import annotations

import math

import numpy as np

from saber.config import TaskType

OUTPUT_CV = 0.6
INPUT_CV = 0.6
INPUT_MAX_FACTOR = 4.0


def lognormal_params(mean: float, cv: float) -> tuple[float, float]:
    """(mu, sigma) of the normal underlying a lognormal with this mean and CV."""
    sigma2 = math.log1p(cv * cv)
    return math.log(mean) - sigma2 / 2.0, math.sqrt(sigma2)


def sample_lengths(
    rng: np.random.Generator, mean: float, cv: float, size: int, upper: int
) -> np.ndarray:
    mu, sigma = lognormal_params(mean, cv)
    raw = rng.lognormal(mu, sigma, size)
    return np.clip(np.rint(raw), 1, upper).astype(np.int64)


def sample_output_tokens(rng: np.random.Generator, task: TaskType, size: int) -> np.ndarray:
    """True answer lengths; never above the task's client cap, so both bench modes agree."""
    return sample_lengths(rng, task.mean_output_tokens, OUTPUT_CV, size, task.max_tokens)


def sample_input_tokens(rng: np.random.Generator, task: TaskType, size: int) -> np.ndarray:
    upper = int(task.mean_input_tokens * INPUT_MAX_FACTOR)
    return sample_lengths(rng, task.mean_input_tokens, INPUT_CV, size, upper)
