"""saber-profile against genuine llama.cpp (llama-server, a tiny random GGUF model, on CPU).

Run with ``.venv/bin/pytest -q -m llamacpp tests/real/test_profile_llamacpp.py -s``.
llama-server gives a clean load-vs-speed curve (docs/real-backends.md), so the profile
must explain its points well, with the same model kept run after run (usl-solo: a lone
request runs faster than the batched curve). The engine runs one thread ranked above
the rest of the machine (``harness.start_llamacpp``), and each level is measured in two
rounds (up, down, up), a level whose rounds disagree being measured again: other work
on the machine slows a part of some rounds, not the curve.
On a machine too busy for that the test says so in its failure message.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from real_support import served_profile

from harness import EngineProcess
from saber.profile import Point, points_path, read_points
from saber.profile.cli import main
from saber.speed import load_profile

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
    with capsys.disabled():
        print(f"points per level: {per_level}")
        print(
            f"mean speed per level (± standard error; rounds stray {spread:.1%}): "
            + ", ".join(f"L={k}: {v:.1f} ± {errors[k] * v:.1f}" for k, v in means.items())
        )
        print(f"kept {profile.kind} {profile.params}; in-sample R^2={profile.r2:.4f}")
        print(f"scored {profile.profiling.scoring}:")
        for fit in profile.profiling.fits:
            print(
                f"  {fit.kind:9s} level error={fit.level_error:.2%} held-out R^2={fit.r2:.4f} "
                f"MAPE={100 * fit.mape:.2f}% in-sample R^2={fit.in_sample_r2:.4f}"
            )
    # A level whose rounds disagreed was visited again: more points, never fewer.
    assert all(n >= PER_LEVEL for n in per_level.values()), per_level
    assert best.kind == profile.kind
    assert best.in_sample_r2 == pytest.approx(profile.r2)
    busy = f"load average {os.getloadavg()} on {os.cpu_count()} CPUs"
    model = profile.speed_model()
    # The kept curve explains the batched levels' means (a lone request's is checked
    # below). Not the per-request R^2 (printed), which also counts how much one request
    # strays from its level on a shared 2-core machine (0.972 in one run, 0.927 in the
    # next), nor the selection's held-out level R^2 (printed), which leaves level 2 out
    # and extrapolates to it from the others: one spell of the machine at one level then
    # moves it, as in the CI run of c45c30d, where level 4 measured 64.3 tokens/s against
    # the curve's 68.6 (rounds strayed 6.2%) and the held-out score fell to 0.964 while
    # the kept curve explained the same means at 0.995.
    batched = [level for level in LEVELS if level > 1]
    centre = np.mean([means[level] for level in batched])
    residual = sum((model.predict(float(level)) - means[level]) ** 2 for level in batched)
    spread_ss = sum((means[level] - centre) ** 2 for level in batched)
    explained = 1.0 - residual / spread_ss
    assert explained >= 0.98, (f"level means R^2 {explained:.4f}", busy)
    # The curve the engine really has, a lone request included (docs/profile.md): within
    # 10% of each level's mean, or within three standard errors of that mean, as the
    # profiler judges two rounds the same speed (``agree``). Each round is one spell of
    # whatever else the machine does, and a 2-core machine moves this engine 5-10% between
    # spells: the CI run of 4b49627 measured load 6 at 40.9 tokens/s against the curve's
    # 45.6 (10.3%); rounds strayed from their level's mean by 7.1% (pooled) in a quiet run.
    for level, mean in means.items():
        tolerance = max(0.10, 3.0 * errors[level]) * mean
        assert model.predict(float(level)) == pytest.approx(mean, abs=tolerance), (
            level,
            f"rounds stray {spread:.1%}",
            busy,
        )
    assert out.with_suffix(".png").exists()

    # The gateway serves with it: /saber/status names the profile and its curve.
    served_profile(llamacpp_engine, out)
