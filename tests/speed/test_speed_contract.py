"""The functional suite every speed model in MODELS must pass."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from saber.speed import MODELS, SPEED_FLOOR, FitError, SpeedModel, fit_model

Points = tuple[np.ndarray, np.ndarray]
WIDE = np.linspace(1.0, 256.0, 2041)


@pytest.fixture
def decreasing(truths: dict[str, SpeedModel], make_points: Callable[..., Points]) -> Points:
    """A realistic profile, USL-shaped with 5% noise, that every model is fitted to."""
    return make_points(truths["usl"], seed=3)


def test_registry_names_match_kinds() -> None:
    assert next(iter(MODELS)) == "usl"
    for kind, cls in MODELS.items():
        assert cls.kind == kind
        assert issubclass(cls, SpeedModel)


def test_monotone_and_positive_over_wide_range(kind: str, decreasing: Points) -> None:
    model = fit_model(kind, *decreasing)
    speeds = model.predict(WIDE)
    assert np.all(speeds > 0)
    assert np.all(np.diff(speeds) <= 1e-9 * speeds[:-1])
    assert model.predict(1e9) >= SPEED_FLOOR


def test_scalar_and_array_predictions_agree(kind: str, decreasing: Points) -> None:
    model = fit_model(kind, *decreasing)
    loads = [1, 1.0, 1.5, 7, 64.0, 255.5, 1e6]
    batch = model.predict(np.array(loads, dtype=float))
    assert isinstance(batch, np.ndarray)
    for load, expected in zip(loads, batch, strict=True):
        scalar = model.predict(load)
        assert type(scalar) is float
        assert scalar == pytest.approx(expected, rel=1e-12)
        assert model(load) == scalar
    assert type(model.predict(np.float32(3.0))) is float
    assert type(model.predict(np.int64(3))) is float
    assert model.predict([2.0, 3.0]).shape == (2,)


def test_loads_below_one_count_as_one(kind: str, truth: SpeedModel) -> None:
    assert truth.predict(0.0) == truth.predict(1.0)
    np.testing.assert_array_equal(truth.predict(np.array([0.0, 0.5])), truth.predict(1.0))


def test_params_round_trip(kind: str, decreasing: Points) -> None:
    model = fit_model(kind, *decreasing)
    assert set(model.params) == set(model.param_names)
    assert type(model).from_params(**model.params) == model
    as_dict = model.to_dict()
    assert as_dict["kind"] == kind
    again = MODELS[as_dict["kind"]].from_params(**as_dict["params"])
    assert again == model
    assert again.predict(17.0) == model.predict(17.0)
    assert kind in repr(model).lower() or type(model).__name__ in repr(model)


def test_params_is_a_copy(kind: str, truth: SpeedModel) -> None:
    before = truth.predict(10.0)
    truth.params[truth.param_names[0]] = -1.0
    assert truth.predict(10.0) == before


GARBAGE: dict[str, tuple[object, object, str]] = {
    "one point": ([4.0], [30.0], "at least 2 points"),
    "no points": ([], [], "no data"),
    "nan speed": ([1.0, 2.0, 3.0], [50.0, float("nan"), 40.0], "speeds must be finite"),
    "inf load": ([1.0, float("inf"), 3.0], [50.0, 45.0, 40.0], "loads must be finite"),
    "one level": ([8.0] * 50, np.linspace(20.0, 30.0, 50), "2 distinct load levels"),
    "lengths differ": ([1.0, 2.0, 3.0], [50.0, 45.0], "differ in length"),
    "zero speed": ([1.0, 2.0, 3.0], [50.0, 0.0, 40.0], "speeds must be > 0"),
    "load below one": ([0.5, 2.0, 3.0], [50.0, 45.0, 40.0], "loads must be >= 1"),
    "not numbers": (["a", "b"], [1.0, 2.0], "must be numbers"),
    "two-dimensional": ([[1.0, 2.0]], [[3.0, 4.0]], "1-D"),
}


@pytest.mark.parametrize("case", list(GARBAGE))
def test_fit_rejects_garbage(kind: str, case: str) -> None:
    loads, speeds, message = GARBAGE[case]
    with pytest.raises(FitError, match=message):
        MODELS[kind].fit(loads, speeds)


def test_robust_to_five_percent_outliers(
    kind: str, truth: SpeedModel, make_points: Callable[..., Points]
) -> None:
    """5% of points off by 3-10x either way move the curve by under 3% (worst seen: 1.3%)."""
    model = fit_model(kind, *make_points(truth, outliers=0.05, seed=11))
    grid = np.arange(1.0, 65.0)
    np.testing.assert_allclose(model.predict(grid), truth.predict(grid), rtol=0.03)


@pytest.mark.parametrize("levels", [(1, 16, 48), (1, 32), (4, 8, 12)])
def test_usable_with_few_load_levels(
    kind: str, truth: SpeedModel, make_points: Callable[..., Points], levels: tuple[int, ...]
) -> None:
    model = fit_model(kind, *make_points(truth, n=120, levels=levels, seed=5))
    at = np.asarray(levels, dtype=float)
    np.testing.assert_allclose(model.predict(at), truth.predict(at), rtol=0.05)
    speeds = model.predict(WIDE)
    assert np.all(speeds > 0) and np.all(np.diff(speeds) <= 1e-9 * speeds[:-1])


ADVERSE: dict[str, Points] = {
    "rising speeds": (np.arange(1.0, 33.0), np.linspace(20.0, 60.0, 32)),
    "flat speeds": (np.arange(1.0, 33.0), np.full(32, 42.0)),
    "cliff after one": (np.array([1.0, 2.0, 3.0, 4.0, 8.0]), np.array([100, 5, 4, 3.5, 2.0])),
    "tiny speeds": (np.arange(1.0, 9.0), np.linspace(0.02, 0.005, 8)),
    "huge loads": (np.array([1.0, 1e3, 1e4, 1e5]), np.array([50.0, 1.0, 0.1, 0.01])),
}


@pytest.mark.parametrize("case", list(ADVERSE))
def test_fitted_params_respect_bounds(kind: str, case: str) -> None:
    model = MODELS[kind].fit(*ADVERSE[case])
    assert type(model).from_params(**model.params) == model  # re-validates every bound
    speeds = model.predict(WIDE)
    assert np.all(speeds > 0) and np.all(np.diff(speeds) <= 1e-9 * speeds[:-1])


def test_from_params_names_missing_and_unknown(kind: str, truth: SpeedModel) -> None:
    params = truth.params
    missing = truth.param_names[-1]
    del params[missing]
    with pytest.raises(ValueError, match=f"{missing}: is missing"):
        MODELS[kind].from_params(**params)
    with pytest.raises(ValueError, match="bogus: is not a"):
        MODELS[kind].from_params(**truth.params, bogus=1.0)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "1.0", None, True])
def test_from_params_rejects_non_numbers(kind: str, truth: SpeedModel, value: object) -> None:
    name = truth.param_names[0]
    with pytest.raises(ValueError, match=f"parameter {name}: must be"):
        MODELS[kind].from_params(**{**truth.params, name: value})
