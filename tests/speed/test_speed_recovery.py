"""Each model recovers known parameters from a noisy synthetic profile."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from saber.speed import MODELS, SpeedModel, fit_model

# Relative tolerance per parameter: 1000 points over L = 1..64 with 5% noise.
# Measured worst case over 20 seeds: lam 1.2%, sigma 9%, kappa 4%, all others < 1.5%,
# but solo 3.6%: only the ~15 points at L=1 carry it.
TOLERANCE: dict[str, dict[str, float]] = {
    "usl": {"lam": 0.03, "sigma": 0.20, "kappa": 0.10},
    "usl-solo": {"lam": 0.03, "sigma": 0.20, "kappa": 0.10, "solo": 0.06},
    "linear": {"a": 0.03, "b": 0.03},
    "logistic": {"a": 0.03, "d": 0.05, "k": 0.05, "l0": 0.03},
    "logdecay": {"a": 0.03, "b": 0.05},
}
GRID = np.arange(1.0, 65.0)


def test_every_model_has_a_tolerance(truths: dict[str, SpeedModel]) -> None:
    assert set(TOLERANCE) == set(MODELS) == set(truths)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_known_parameters(
    kind: str, truth: SpeedModel, make_points: Callable[..., tuple], seed: int
) -> None:
    model = fit_model(kind, *make_points(truth, seed=seed))
    for name, tolerance in TOLERANCE[kind].items():
        assert model.params[name] == pytest.approx(truth.params[name], rel=tolerance), name


def test_predictions_within_two_percent_of_truth(
    kind: str, truth: SpeedModel, make_points: Callable[..., tuple]
) -> None:
    model = fit_model(kind, *make_points(truth, seed=7))
    np.testing.assert_allclose(model.predict(GRID), truth.predict(GRID), rtol=0.02)


def test_usl_holds_kappa_at_zero_with_two_levels(
    truths: dict[str, SpeedModel], make_points: Callable[..., tuple]
) -> None:
    truth = truths["usl"]
    model = fit_model("usl", *make_points(truth, levels=[1, 32], noise=0.0))
    assert model.params["kappa"] == 0.0
    np.testing.assert_allclose(model.predict([1.0, 32.0]), truth.predict([1.0, 32.0]), rtol=1e-6)
