"""Shared set-up for the saber-profile tests: a fast saber-sim and a short dataset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from profile_support import write_dataset

from saber.sim.http import RunningSim, serve_in_thread

# Functional tests check behaviour, not timing: run the engine model 10x faster.
FAST_SCALE = 10.0


@pytest.fixture(scope="module")
def fast_sim() -> Iterator[RunningSim]:
    with serve_in_thread(time_scale=FAST_SCALE, seed=1) as sim:
        yield sim


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("dataset") / "short.jsonl")
