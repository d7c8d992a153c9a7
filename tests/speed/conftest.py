"""Synthetic profiles with known truth, shared by the speed-model tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from saber.speed import (
    MODELS,
    LinearModel,
    LogDecayModel,
    LogisticModel,
    SoloUSLModel,
    SpeedModel,
    USLModel,
)

# Curves in the range a code model on one GPU shows: ~60 tok/s alone, falling with load.
TRUTH: dict[str, SpeedModel] = {
    "usl": USLModel(lam=60.0, sigma=0.02, kappa=0.0005),
    # llama.cpp on a CPU: one request alone runs 1.5x as fast as USL's batched curve says.
    "usl-solo": SoloUSLModel(lam=60.0, sigma=0.02, kappa=0.0005, solo=90.0),
    "linear": LinearModel(a=50.0, b=0.6),
    "logistic": LogisticModel(a=60.0, d=8.0, k=0.12, l0=30.0),
    "logdecay": LogDecayModel(a=55.0, b=10.0),
}

Points = tuple[np.ndarray, np.ndarray]
MakePoints = Callable[..., Points]


def synthetic(
    model: SpeedModel,
    *,
    n: int = 1000,
    levels: Sequence[float] = tuple(range(1, 65)),
    noise: float = 0.05,
    outliers: float = 0.0,
    seed: int = 0,
) -> Points:
    """n points at random levels; multiplicative Gaussian noise; a share of wild outliers."""
    rng = np.random.default_rng(seed)
    loads = rng.choice(np.asarray(levels, dtype=float), size=n)
    speeds = model.predict(loads) * (1.0 + noise * rng.standard_normal(n))
    wild = rng.random(n) < outliers
    speeds[wild] *= rng.choice([0.1, 0.3, 3.0, 5.0], size=int(wild.sum()))
    return loads, np.abs(speeds)


@pytest.fixture(params=list(MODELS))
def kind(request: pytest.FixtureRequest) -> str:
    """Every registered model kind: the shared suite runs once per kind."""
    return request.param


@pytest.fixture
def truth(kind: str) -> SpeedModel:
    assert kind in TRUTH, f"add a ground-truth {kind} curve to tests/speed/conftest.py"
    return TRUTH[kind]


@pytest.fixture
def truths() -> dict[str, SpeedModel]:
    return dict(TRUTH)


@pytest.fixture
def make_points() -> MakePoints:
    return synthetic
