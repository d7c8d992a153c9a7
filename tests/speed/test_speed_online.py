"""LiveFit: refitting f(L) on what the engine delivers, and judging the departure."""

from __future__ import annotations

import numpy as np
import pytest

from saber.speed import MODELS, LiveFit

USL = MODELS["usl"]


def points(model, n: int, seed: int = 0, noise: float = 0.05):
    rng = np.random.default_rng(seed)
    loads = rng.uniform(1, 40, n)
    speeds = np.array([model(x) for x in loads]) * rng.lognormal(0, noise, n)
    return loads, speeds


def test_a_fit_is_due_only_with_enough_new_points_on_enough_loads():
    fit = LiveFit(min_points=50, every=20, window=200)
    for _ in range(60):
        fit.observe(4.0, 50.0)  # one load only
    assert not fit.due()
    for load in (1.0, 8.0, 16.0):
        for _ in range(10):
            fit.observe(load, 40.0)
    assert fit.due()
    fit.snapshot()
    assert not fit.due()  # nothing new since
    fit.observe(float("nan"), 1.0)
    fit.observe(0.5, 10.0)
    fit.observe(3.0, -1.0)
    assert len(fit) == 90  # bad points are dropped


def test_a_slower_engine_is_found_and_swapped_in():
    profile = USL.from_params(lam=130.0, sigma=0.05, kappa=0.0002)
    engine = USL.from_params(lam=87.0, sigma=0.05, kappa=0.0002)  # 1.5x slower
    fit = LiveFit(min_points=100, every=100)
    for load, speed in zip(*points(engine, 300), strict=True):
        fit.observe(load, speed)
    assert fit.due()
    result = fit.judge(profile, "usl", *fit.snapshot())
    assert result is not None and result.swap
    assert result.departure == pytest.approx(1 / 1.5 - 1, abs=0.08) or result.departure > 0.25
    assert result.model(1.0) == pytest.approx(87.0, rel=0.1)
    assert (fit.refits, fit.swaps) == (1, 1)


def test_the_same_engine_keeps_its_curve():
    profile = USL.from_params(lam=130.0, sigma=0.05, kappa=0.0002)
    fit = LiveFit(min_points=100, every=100)
    for load, speed in zip(*points(profile, 400, seed=1), strict=True):
        fit.observe(load, speed)
    result = fit.judge(profile, "usl", *fit.snapshot())
    assert result is not None and not result.swap and result.departure < fit.margin
    assert (fit.refits, fit.swaps) == (1, 0)


def test_points_that_cannot_be_fitted_give_no_refit():
    fit = LiveFit(min_points=2, every=1, window=10)
    result = fit.judge(lambda x: 1.0, "usl", np.array([2.0, 2.0]), np.array([10.0, 11.0]))
    assert result is None and fit.refits == 0


def test_a_narrow_band_of_loads_gives_no_refit():
    # Overloaded, a gateway runs 40-48 requests for minutes: a curve fitted there is a
    # guess at one request (on llama.cpp it said 4 million tokens/s). Calibration scales
    # the curve in use instead.
    profile = USL.from_params(lam=300.0, sigma=0.7, kappa=0.01)
    rng = np.random.default_rng(0)
    loads = rng.uniform(40, 48, 60)
    speeds = np.array([profile(x) for x in loads]) * 1.7 * rng.lognormal(0, 0.1, 60)
    fit = LiveFit(min_points=30, every=30, window=60)
    assert fit.judge(profile, "usl", loads, speeds) is None
    assert fit.refits == 0


def test_below_the_loads_seen_a_refit_keeps_the_curve_in_use_at_one_request():
    # Points at 4-40 from a curve that, extrapolated, runs 6x the profile at one
    # request: the refit follows the points where they are, and at one request, which
    # they say little of, keeps the profile's speed.
    profile = USL.from_params(lam=100.0, sigma=0.3, kappa=0.0)
    wild = USL.from_params(lam=600.0, sigma=1.0, kappa=0.5)
    rng = np.random.default_rng(1)
    loads = rng.uniform(4, 40, 200)
    speeds = np.array([wild(x) for x in loads]) * rng.lognormal(0, 0.02, 200)
    result = LiveFit().judge(profile, "usl", loads, speeds)
    assert result is not None and result.swap
    assert result.model(1.0) == pytest.approx(100.0, rel=0.05)
    for load in (6.0, 12.0, 24.0):
        assert result.model(load) == pytest.approx(wild(load), rel=0.15)
    # The same engine seen from 1 to 40: the points say what one request runs at.
    loads = rng.uniform(1, 40, 200)
    speeds = np.array([wild(x) for x in loads]) * rng.lognormal(0, 0.02, 200)
    result = LiveFit().judge(profile, "usl", loads, speeds)
    assert result is not None and result.swap
    assert result.model(1.0) == pytest.approx(600.0, rel=0.15)


def test_an_engine_slower_only_under_load_keeps_its_lone_speed():
    # The H100 on joint-W2 at twice its capacity: its long prompts made it run a third
    # slower than profiled at 45-133 requests, not alone. Without the profile's f(1) the
    # refit scaled the whole curve down and put one request at 61 tokens/s, half of
    # what it ran at.
    profile = USL.from_params(lam=114.8, sigma=0.0085, kappa=0.00002)
    rng = np.random.default_rng(2)
    loads = rng.uniform(45, 133, 200)
    speeds = 0.65 * np.array([profile(x) for x in loads]) * rng.lognormal(0, 0.05, 200)
    # One request that ran alone among them says as little: the anchor stays.
    for lone in ((), (1.7,)):
        seen = np.concatenate((loads, lone))
        fast = np.concatenate((speeds, [profile(x) for x in lone]))
        result = LiveFit().judge(profile, "usl", seen, fast)
        assert result is not None and result.swap
        assert result.model(1.0) == pytest.approx(114.8, rel=0.05)
        for load in (50.0, 90.0, 130.0):
            assert result.model(load) == pytest.approx(0.65 * profile(load), rel=0.1)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        LiveFit(window=10, min_points=20)
    with pytest.raises(ValueError):
        LiveFit(margin=0)
