"""saber-profile against genuine llama.cpp (llama-server, a tiny random GGUF model, on CPU).

Run with ``.venv/bin/pytest -q -m llamacpp tests/real/test_profile_llamacpp.py -s``.
llama-server gives a clean load-vs-speed curve (docs/real-backends.md), so the kept curve
must explain every level's mean speed within the noise its rounds show, whichever model
is kept (usl-solo, for a lone request that runs faster than the batched curve, or USL,
which the selection keeps when the two are within its tie: docs/profile.md). The engine
runs one thread ranked above the rest of the machine (``harness.start_llamacpp``), and
each level is measured in three rounds (up, down, up), a level whose rounds disagree
being measured again: other work on the machine slows a part of some rounds, not the
curve.
On a machine too busy for that the test says so in its failure message.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from real_support import served_profile
from scipy.stats import chi2

from harness import EngineProcess
from saber.profile import Point, points_path, read_points
from saber.profile.cli import main
from saber.speed import Profile, load_profile

pytestmark = pytest.mark.llamacpp

# llama-server runs 32 slots (-np 32): none waits. Levels between the doublings give each
# level left out of a fit (the selection's score) neighbours on both sides. Not 3: on this
# CPU three sequences run faster than both two and four would say, a quirk of llama.cpp's
# batched kernels that no speed model is asked to follow.
LEVELS = (1, 2, 4, 6, 8, 12, 16, 24, 32)
PER_LEVEL = 12
# Three rounds (up, down, up) of 4 points: each level's mean averages three spells of
# whatever else the machine does, which moves this engine's speed by 5-10% even with a
# core to itself (the other core's work shares its cache and memory bandwidth).
ROUNDS = 3
# How far this engine's level means stray from any smooth curve, whatever the noise: a
# few levels in every run (L=24 5-9% slower than the curve through 16 and 32 in ten runs,
# docs/profile.md; L=12 10% faster in one run whose three rounds agreed within 4%).
CURVE_ERROR = 0.03


def short_dataset(path: Path, n: int = 200) -> Path:
    """Short prompts and outputs of 80-112 tokens: TTFT stays a small, steady share."""
    rng = np.random.default_rng(0)
    lines = [
        json.dumps(
            {
                "prompt_tokens": int(rng.integers(16, 25)),
                "output_tokens": int(rng.integers(80, 113)),
            }
        )
        for _ in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def round_means(points: list[Point], level: int) -> list[float]:
    """The mean speed of each round of a level: one spell of the machine each."""
    rounds: dict[int, list[float]] = {}
    for p in points:
        if p.level == level:
            rounds.setdefault(p.round, []).append(p.speed)
    return [float(np.mean(v)) for v in rounds.values()]


def spell_spread(points: list[Point]) -> float:
    """How far one round's mean strays from its level's, relative to it: the standard
    deviation pooled over every level's rounds (two rounds say little on their own)."""
    deviations, dof = 0.0, 0
    for level in {p.level for p in points}:
        means = np.array(round_means(points, level))
        if len(means) > 1:
            deviations += float(np.sum((means / means.mean() - 1.0) ** 2))
            dof += len(means) - 1
    return float(np.sqrt(deviations / dof)) if dof else 0.0


def diagnosis(
    profile: Profile,
    points: list[Point],
    means: dict[int, float],
    errors: dict[int, float],
    spread: float,
) -> str:
    """What a failure needs to name its cause: each level's rounds against the kept curve,
    and how every model scored."""
    model = profile.speed_model()
    lines = [f"kept {profile.kind} {profile.params}; in-sample R^2={profile.r2:.4f}"]
    lines.append(f"level: mean ± standard error (rounds stray {spread:.1%}) | curve | rounds")
    for level, mean in means.items():
        curve = model.predict(float(level))
        rounds = ", ".join(f"{m:.1f}" for m in round_means(points, level))
        lines.append(
            f"  L={level}: {mean:.1f} ± {errors[level] * mean:.1f} | {curve:.1f} "
            f"({curve / mean - 1.0:+.1%}) | {rounds}"
        )
    assert profile.profiling is not None
    lines.append(f"scored {profile.profiling.scoring}:")
    for fit in profile.profiling.fits:
        lines.append(
            f"  {fit.kind:9s} level error={fit.level_error:.2%} held-out R^2={fit.r2:.4f} "
            f"MAPE={100 * fit.mape:.2f}% in-sample R^2={fit.in_sample_r2:.4f}"
        )
    return "\n".join(lines)


def test_profile_llamacpp(
    llamacpp_engine: EngineProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "llamacpp.json"
    code = main(
        [
            "--base-url", llamacpp_engine.base_url, "--model", llamacpp_engine.model,
            "--dataset", str(short_dataset(tmp_path / "short.jsonl")),
            "--levels", ",".join(map(str, LEVELS)), "--requests-per-level", str(PER_LEVEL),
            "--rounds", str(ROUNDS),
            "--out", str(out), "--no-progress",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    with capsys.disabled():
        print("\n" + captured.err + captured.out)
    assert code == 0, captured.err
    profile = load_profile(out)
    assert profile.backend.kind == "llamacpp" and profile.backend.version
    assert profile.profiling is not None and profile.profiling.saturated_at is None
    assert profile.profiling.lengths == "forced"
    recorded = read_points(points_path(out))
    per_level = {level: recorded.measured(level) for level in LEVELS}
    best = profile.profiling.fits[0]
    fit_points = recorded.fit_points()
    means = {
        level: float(np.mean([p.speed for p in fit_points if p.level == level])) for level in LEVELS
    }
    spread = spell_spread(fit_points)
    # A level's mean is known to within spread / sqrt(its rounds), relative.
    errors = {level: spread / np.sqrt(len(round_means(fit_points, level))) for level in LEVELS}
    busy = f"load average {os.getloadavg()} on {os.cpu_count()} CPUs"
    model = profile.speed_model()
    found = diagnosis(profile, fit_points, means, errors, spread) + "\n" + busy
    with capsys.disabled():
        print(f"points per level: {per_level}\n{found}")
    # A level whose rounds disagreed was visited again: more points, never fewer.
    assert all(n >= PER_LEVEL for n in per_level.values()), (per_level, found)
    assert best.kind == profile.kind
    assert best.in_sample_r2 == pytest.approx(profile.r2)
    # The curve the engine really has, a lone request included (docs/profile.md): within
    # 10% of each level's mean, or within three standard errors of that mean, as the
    # profiler judges two rounds the same speed (``agree``). Each round is one spell of
    # whatever else the machine does, and a 2-core machine moves this engine 5-10% between
    # spells: the CI run of 4b49627 measured load 6 at 40.9 tokens/s against the curve's
    # 45.6 (10.3%); rounds strayed from their level's mean by 7.1% (pooled) in a quiet run.
    for level, mean in means.items():
        tolerance = max(0.10, 3.0 * errors[level]) * mean
        assert model.predict(float(level)) == pytest.approx(mean, abs=tolerance), (level, found)
    # Together, the levels miss the curve by no more than their noise says: each miss
    # over its level's standard error and the curve's own error (``CURVE_ERROR``),
    # squared and summed, within chi-square's 99.9% point for the levels less the curve's
    # parameters. The bound widens with the rounds' spread, as the check above does,
    # where a fixed R^2 of the means did not: the CI run of 915f239 scored 0.960 against
    # 0.98, on a machine whose spells that run never printed.
    misses = sum(
        (model.predict(float(level)) / mean - 1.0) ** 2 / (errors[level] ** 2 + CURVE_ERROR**2)
        for level, mean in means.items()
    )
    dof = len(means) - len(profile.params)
    assert misses <= chi2.ppf(0.999, dof), (f"chi-square {misses:.1f} on {dof} dof", found)
    assert out.with_suffix(".png").exists()

    # The gateway serves with it: /saber/status names the profile and its curve.
    served_profile(llamacpp_engine, out)
