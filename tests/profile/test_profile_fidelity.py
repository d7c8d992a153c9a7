"""saber-profile over HTTP recovers the engine model's own speed curve.

saber-sim serves the paper preset on the wall clock; the profile fitted from
what a client measures must predict the speed the engine model gives in virtual
time (no HTTP at all) at load levels the profile never measured.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from profile_support import engine_truth, read_lengths, run_cli, sim_process

from saber.speed import load_profile, mean_abs_pct_error, r_squared

# Time scale 1: the sim's clock is the engine model's, and per-request HTTP
# overhead (a few ms) stays about 2% of a request. Faster scales trade accuracy
# for time on a busy 2-core machine.
TIME_SCALE = 1.0
LEVELS = "1,2,4,8,16,32,64"
HELD_OUT = (3, 6, 12, 24, 48)


@pytest.mark.slow
def test_fitted_curve_matches_engine_truth_at_unmeasured_loads(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sim.json"
    with sim_process(TIME_SCALE, "--served-model-name", "sim") as url:
        code, report, stderr = run_cli(
            [
                "--base-url", url, "--model", "sim", "--dataset", str(dataset),
                "--levels", LEVELS, "--requests-per-level", "10", "--out", str(out), "--no-plot",
            ],
            capsys,
        )  # fmt: skip
    assert code == 0, stderr
    profile = load_profile(out)
    model = profile.speed_model()
    lengths = read_lengths(dataset)
    truth = np.array([TIME_SCALE * engine_truth(lengths, level).mean() for level in HELD_OUT])
    predicted = model.predict(np.array(HELD_OUT, dtype=float))
    mape = mean_abs_pct_error(truth, predicted)
    r2 = r_squared(truth, predicted)
    with capsys.disabled():
        print(f"\nkept {profile.kind} {profile.params}")
        for fit in profile.profiling.fits if profile.profiling else []:
            print(
                f"  {fit.kind:9s} level error={fit.level_error:.2%} held-out R^2={fit.r2:.4f} "
                f"MAPE={100 * fit.mape:.2f}% level-mean R^2={fit.level_r2:.4f}"
            )
        for level, t, p in zip(HELD_OUT, truth, predicted, strict=True):
            error = 100 * (p / t - 1)
            print(f"  L={level:3d} engine {t:7.2f} tok/s  profile {p:7.2f}  ({error:+.1f}%)")
        print(f"  vs engine truth: MAPE={100 * mape:.2f}%  R^2={r2:.4f}")
    # With both cores busy (the CI's load), saber-sim's real-time serving falls behind
    # its virtual clock at the highest loads, so what the client measures is slower than
    # the engine model's truth there: seen -10% / -11% at L = 24 / 48, MAPE 5.6%,
    # R^2 0.979. On a quiet machine: MAPE 2-3%, R^2 0.99+.
    assert mape <= 0.10, report
    assert r2 >= 0.97, report
    # No level was taken for saturated: all seven measured, ten points each at least (a
    # level whose two rounds disagree is measured again and keeps more: seen at L = 64).
    assert profile.profiling is not None and profile.profiling.levels == [1, 2, 4, 8, 16, 32, 64]
    assert profile.profiling.saturated_at is None, report
    assert profile.points.count >= 70, report
