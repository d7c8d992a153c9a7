"""Each model's own parameter bounds, named in the error."""

from __future__ import annotations

import pytest

from saber.speed import (
    MODELS,
    LinearModel,
    LogDecayModel,
    LogisticModel,
    SoloUSLModel,
    USLModel,
)

OUT_OF_BOUNDS: list[tuple[str, dict[str, float], str]] = [
    ("usl", {"lam": 0.0, "sigma": 0.1, "kappa": 0.0}, "lam: must be > 0"),
    ("usl", {"lam": 50.0, "sigma": 1.5, "kappa": 0.0}, "sigma: must be between 0 and 1"),
    ("usl", {"lam": 50.0, "sigma": -0.1, "kappa": 0.0}, "sigma: must be between 0 and 1"),
    ("usl", {"lam": 50.0, "sigma": 0.1, "kappa": -1e-4}, "kappa: must be >= 0"),
    ("usl-solo", {"lam": 0.0, "sigma": 0.1, "kappa": 0.0, "solo": 1.0}, "lam: must be > 0"),
    ("usl-solo", {"lam": 50.0, "sigma": 2.0, "kappa": 0.0, "solo": 60.0}, "sigma: must be"),
    ("usl-solo", {"lam": 50.0, "sigma": 0.1, "kappa": -1.0, "solo": 60.0}, "kappa: must be >= 0"),
    ("usl-solo", {"lam": 50.0, "sigma": 0.1, "kappa": 0.0, "solo": 40.0}, "solo: must be between"),
    ("usl-solo", {"lam": 50.0, "sigma": 0.1, "kappa": 0.0, "solo": 5e3}, "solo: must be between"),
    ("linear", {"a": -1.0, "b": 0.5}, "a: must be > 0"),
    ("linear", {"a": 50.0, "b": -0.5}, "b: must be >= 0"),
    ("logdecay", {"a": 0.0, "b": 1.0}, "a: must be > 0"),
    ("logdecay", {"a": 50.0, "b": -1.0}, "b: must be >= 0"),
    ("logistic", {"a": 0.0, "d": 0.0, "k": 0.1, "l0": 10.0}, "a: must be > 0"),
    ("logistic", {"a": 50.0, "d": 60.0, "k": 0.1, "l0": 10.0}, "d: must be between 0 and a"),
    ("logistic", {"a": 50.0, "d": -1.0, "k": 0.1, "l0": 10.0}, "d: must be between 0 and a"),
    ("logistic", {"a": 50.0, "d": 5.0, "k": -0.1, "l0": 10.0}, "k: must be >= 0"),
]


@pytest.mark.parametrize(("kind", "params", "message"), OUT_OF_BOUNDS)
def test_out_of_bounds_parameter_is_named(
    kind: str, params: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        MODELS[kind].from_params(**params)


def test_every_model_has_bound_cases() -> None:
    assert {kind for kind, _, _ in OUT_OF_BOUNDS} == set(MODELS)


def test_forms_at_known_points() -> None:
    assert USLModel(lam=60.0, sigma=0.1, kappa=0.01).predict(3.0) == pytest.approx(
        60.0 / (1 + 0.1 * 2 + 0.01 * 6)
    )
    assert LinearModel(a=50.0, b=2.0).predict(10.0) == pytest.approx(30.0)
    solo = SoloUSLModel(lam=60.0, sigma=0.1, kappa=0.01, solo=120.0)
    assert solo.predict(1.0) == pytest.approx(120.0)
    assert solo.predict(3.0) == pytest.approx(60.0 / (1 + 0.1 * 2 + 0.01 * 6))
    usl_denominator = 1 + 0.1 * 0.25 + 0.01 * 1.25 * 0.25
    assert solo.predict(1.25) == pytest.approx(60.0 / (usl_denominator - 0.75 * 0.5))
    usl = USLModel(lam=60.0, sigma=0.1, kappa=0.01)
    same = SoloUSLModel(lam=60.0, sigma=0.1, kappa=0.01, solo=60.0)
    for load in (1.0, 1.5, 2.0, 7.0):
        assert same.predict(load) == pytest.approx(usl.predict(load))
    assert LogDecayModel(a=50.0, b=10.0).predict(2.718281828459045) == pytest.approx(40.0)
    logistic = LogisticModel(a=60.0, d=10.0, k=0.5, l0=20.0)
    assert logistic.predict(20.0) == pytest.approx(35.0)
    assert logistic.predict(1e9) == pytest.approx(10.0)


def test_linear_and_logdecay_never_reach_zero() -> None:
    assert LinearModel(a=50.0, b=2.0).predict(1000.0) > 0
    assert LogDecayModel(a=50.0, b=10.0).predict(1e12) > 0
