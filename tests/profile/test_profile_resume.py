"""Ctrl-C keeps what was measured; --resume finishes the run without redoing it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from profile_support import run_cli

from harness import wait_for
from saber.profile import points_path, read_points
from saber.sim.http import serve_in_thread
from saber.speed import load_profile


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def levels_ended(path: Path) -> int:
    if not path.exists():
        return 0
    return sum('"type": "level"' in line for line in path.read_text().splitlines())


@pytest.mark.slow
def test_interrupt_then_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dataset: Path
) -> None:
    out = tmp_path / "run.json"
    store = points_path(out)
    args = [
        "--model", "sim", "--dataset", str(dataset), "--levels", "1,2,4,8",
        "--requests-per-level", "20", "--out", str(out), "--no-plot", "--no-progress",
    ]  # fmt: skip
    # Time scale 2: the second rounds of levels 2 and 1, left when 8 and 4 have ended,
    # take about 5 s, in which the interrupt arrives.
    with serve_in_thread(time_scale=2.0, served_model_name=("sim",), seed=1) as sim:
        proc = subprocess.Popen(
            [sys.executable, "-m", "saber.profile", "--base-url", sim.url, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Ctrl-C as a user at a terminal sends it: a suite started in the background
            # (nohup, `&` in a script) passes SIGINT down ignored, and the profiler then
            # ran to its end (exit 0), which read as an interrupt that came too late.
            preexec_fn=_sigint_default,
        )
        try:
            wait_for(
                lambda: (levels_ended(store), proc.poll()),
                lambda seen: seen[0] >= 2 or seen[1] is not None,
                timeout=60,
                step=0.05,
                describe="two levels measured, or the run ended (levels ended, exit code)",
            )
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130, stderr
        assert "interrupted:" in stderr and "--resume" in stderr
        assert "Traceback" not in stderr
        # Levels go up in the first round and down in the second: 8 and 4 are complete,
        # 1 and 2 half measured. That fits, so the interrupted run still wrote a profile.
        assert load_profile(out).notes is not None and "partial run" in (
            load_profile(out).notes or ""
        )
        assert "wrote" in stdout
        before = read_points(store)
        assert [before.measured(level) for level in (4, 8)] == [20, 20]
        assert sorted(before.ended) == [4, 8]
        kept = [p for p in before.points if p.level in (4, 8)]

        code, _, err = run_cli(["--base-url", sim.url, *args, "--resume"], capsys)
    assert code == 0, err
    assert "resuming" in err
    after = read_points(store)
    profile = load_profile(out)
    assert profile.profiling is not None
    # 20 points a level. A level whose rounds disagree is visited again (timing on a busy
    # machine: seen once in three under load, at any level), and keeps more; only those.
    again = set(profile.profiling.remeasured_levels)
    measured = {level: after.measured(level) for level in (1, 2, 4, 8)}
    assert all(n == 20 or (n > 20 and level in again) for level, n in measured.items()), (
        measured,
        again,
    )
    # What was measured before is kept, and not measured again: first, as it was.
    assert [p for p in after.points if p.level in (4, 8)][: len(kept)] == kept
    assert all(p.round >= 2 for p in after.points[len(before.points) :] if p.level in (4, 8))
    lines = store.read_text().splitlines()
    assert sum(json.loads(line)["type"] == "run" for line in lines) == 1
    assert profile.points.count == sum(measured.values())
    assert "partial run" not in (profile.notes or "")


def test_resume_refuses_other_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dataset: Path
) -> None:
    out = tmp_path / "run.json"
    store = points_path(out)
    store.write_text(
        json.dumps(
            {"type": "run", "model": "sim", "levels": [1, 2], "source": f"dataset {dataset}"}
        )
        + "\n"
        + '{"type": "point", "level": 1, "lo'  # torn by a kill mid-write
    )
    code, _, err = run_cli(
        ["--base-url", "http://127.0.0.1:9", "--model", "sim", "--out", str(out), "--resume",
         "--levels", "1,4"],
        capsys,
    )  # fmt: skip
    assert code == 2
    assert "used levels 1,2, not 1,4; drop the option or start afresh" in err
