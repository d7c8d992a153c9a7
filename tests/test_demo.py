"""``python -m saber.demo``, the README's first command, as a newcomer sees it: it works,
and on the shipped saber-sim with the shipped profile, which go together, it says
nothing a warning would (issue 48: "no profile configured" and "the profile has no
TTFT fit" on every default start); its status explains why f(L) and f(L+1) agree."""

from __future__ import annotations

import os
import subprocess
import sys


def test_the_demo_runs_quietly_and_explains_its_figures() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SABER_")}
    done = subprocess.run(
        [sys.executable, "-m", "saber.demo"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", done.stderr[-3000:]  # no warning, nor anything else
    assert "profile saber-sim-paper.json (the shipped default)" in done.stdout
    assert "outcome=admitted" in done.stdout
    # After the burst the engine is idle: f is read at load 1 for both figures, and the
    # status says why.
    assert "load 0: f(1) " in done.stdout and "f(1) for both" in done.stdout
