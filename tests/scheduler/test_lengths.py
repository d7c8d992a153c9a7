"""Output lengths learned per task: the prior, learning, forgetting, caps and remainders."""

from __future__ import annotations

import numpy as np
import pytest

from saber.config import TaskType
from saber.scheduler import LengthEstimate, TaskLengths


def task(mean: int = 100, cap: int = 1000) -> TaskType:
    return TaskType(
        name="t", mean_input_tokens=10, mean_output_tokens=mean, sla_s=1.0, max_tokens=cap
    )


def test_it_starts_from_the_configured_mean():
    est = LengthEstimate(200)
    assert est.mean() == pytest.approx(200, rel=0.05)
    assert est.quantile(0.5) < est.mean() < est.quantile(0.9)  # a right-skewed prior


def test_it_learns_the_observed_lengths_and_forgets_old_ones():
    rng = np.random.default_rng(0)
    est = LengthEstimate(50, half_life=200)
    for n in rng.lognormal(np.log(400), 0.5, 2000):
        est.observe(int(n))
    first = est.mean()
    assert first == pytest.approx(400 * np.exp(0.125), rel=0.1)  # lognormal mean
    for n in rng.lognormal(np.log(40), 0.5, 2000):
        est.observe(int(n))
    assert est.mean() == pytest.approx(40 * np.exp(0.125), rel=0.1)
    assert est.count == 4000


def test_the_cap_and_the_floor_bound_the_expectation():
    est = LengthEstimate(300)
    assert est.mean(cap=100) < 100 < est.mean()
    assert est.mean(floor=2000) == pytest.approx(2000, rel=1e-3)
    assert est.mean(cap=50, floor=10) <= 50


def test_the_expected_remainder_grows_with_what_a_long_answer_has_produced():
    est = LengthEstimate(100)
    done_10, done_200 = est.remaining(10), est.remaining(200)
    assert 0 < est.remaining(0) <= est.mean() + 1
    assert done_200 > 0 and done_10 > 0
    assert est.remaining(500, cap=500) == 0.0  # at its cap it is done
    assert est.remaining(400, cap=450) <= 50


def test_without_learning_a_task_expects_its_configured_length():
    lengths = TaskLengths([task(100)])
    assert lengths.expected(task(100), None) == 100
    assert lengths.expected(task(100), 30) == 30
    assert lengths.expected(task(100), 30, floor=60) == 60
    lengths.observe("t", 5000)  # ignored
    assert lengths.expected(task(100), None) == 100
    assert lengths.remaining("t", 40, None, 100) == 60


def test_learning_moves_the_expectation_and_the_state_round_trips():
    lengths = TaskLengths([task(100)], learn=True)
    for _ in range(1000):
        lengths.observe("t", 400)
    assert lengths.expected(task(100), None) == pytest.approx(400, rel=0.1)
    assert 140 <= lengths.expected(task(100), 150) <= 150  # what the prior still weighs
    saved = lengths.state()
    fresh = TaskLengths([task(100)], learn=True)
    assert fresh.restore(saved) == ["t"]
    assert fresh.expected(task(100), None) == lengths.expected(task(100), None)
    assert fresh.summary()["t"]["observed"] == 1000


def test_a_corrupt_state_is_refused():
    est = LengthEstimate(100)
    with pytest.raises(ValueError):
        est.restore({"weights": [1.0, 2.0]})
    with pytest.raises(ValueError):
        est.restore({"weights": [float("nan")] * len(est.weights)})
