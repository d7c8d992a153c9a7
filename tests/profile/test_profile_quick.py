"""saber-profile --quick: each level held for a set time (longer at higher loads), in one
round, its duration said before it starts and an ETA after each level (issue 48). The
levels' time is shortened here (QUICK_LEVEL_S); the README's test runs the real one."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from profile_support import run_cli

import saber.profile.run as run_module
from saber.profile import points_path, read_points
from saber.profile.requests import RequestSpec, Supply
from saber.profile.runner import Runner
from saber.profile.stream import Target
from saber.sim.http import RunningSim
from saber.speed import load_profile

LEVEL_S = 1.0
SECONDS = {1: 1.0, 4: 2.0, 16: 3.0}  # half as long again for each doubling of the load


def test_a_quick_run_holds_each_level_for_its_time(
    fast_sim: RunningSim,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run_module, "QUICK_LEVEL_S", LEVEL_S)
    out = tmp_path / "quick.json"
    code, _, err = run_cli(
        ["--base-url", fast_sim.url, "--model", fast_sim.model, "--quick", "--levels", "1,4,16",
         "--out", str(out), "--no-plot"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    # Said before the first level: how long it takes; after each level: the time left.
    planned = re.search(r"quick run: 3 visits, 1 s at load 1 and longer at higher loads: "
                        r"16 s in all", err)  # fmt: skip
    assert planned is not None and planned.start() < err.index("load 1:")
    etas = re.findall(r"^load (\d+): .*; ETA (\d+) s$", err, re.MULTILINE)
    assert etas == [("1", "5"), ("4", "3"), ("16", "0")]  # seconds of levels left
    assert re.search(r"profiled in 0 min \d+ s", err)
    recorded = read_points(points_path(out))
    assert recorded.settings["level_s"] == LEVEL_S and recorded.settings["rounds"] == 1
    assert set(recorded.ended) == {1, 4, 16}
    for level, seconds in SECONDS.items():
        points = [p for p in recorded.points if p.level == level]
        counted = [p for p in points if not p.warmup]
        assert counted and all(p.round == 0 for p in points)
        # Every request of the level started and ended within its time.
        first = min(p.start_s for p in points)
        assert max(p.start_s + p.exec_s for p in points) - first <= seconds + 0.5
    profile = load_profile(out)
    assert profile.profiling is not None and profile.profiling.levels == [1, 4, 16]
    assert "quick: 1 s at load 1, longer at higher loads" in (profile.notes or "")
    assert "partial run" not in (profile.notes or "")
    # A quick run resumed after it ended measures nothing again: it refits.
    code, _, err = run_cli(
        ["--base-url", fast_sim.url, "--model", fast_sim.model, "--out", str(out), "--resume",
         "--no-plot"],
        capsys,
    )  # fmt: skip
    assert code == 0 and "every level is measured already" in err


async def test_a_timed_level_ends_on_time_with_its_requests_cancelled(
    fast_sim: RunningSim,
) -> None:
    """The runner's ``seconds``: the level stops at its time even when far fewer points
    than asked for are in, and the requests still running are cancelled."""

    class Long(Supply):
        def _more(self, level_index: int, start: int) -> list[RequestSpec]:
            return [RequestSpec("x " * 10, 10, 2_000) for _ in range(512)]

    seen: list[object] = []
    async with httpx.AsyncClient(timeout=30) as client:
        runner = Runner(client, Target(fast_sim.url, fast_sim.model, "completions", None),
                        Long("long"), seen.append)  # fmt: skip
        started = time.monotonic()
        result = await runner.run_level(4, 0, need=10_000, warmup=4, seconds=1.0)
        took = time.monotonic() - started
    assert 1.0 <= took < 2.5 and result.measured < 10_000
    assert all(p.exec_s <= took for p in seen)  # type: ignore[attr-defined]
