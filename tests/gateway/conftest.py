"""Shared set-up: a known speed profile, a real saber-sim, real gateway servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_support import SIM_TIME_SCALE, GatewayFactory, settings_for

from harness import write_profile
from saber.gateway import RunningGateway, start_in_thread
from saber.sim.http import RunningSim, serve_in_thread


@pytest.fixture(scope="session")
def profile_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_profile(tmp_path_factory.mktemp("profile") / "known.json")


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    with serve_in_thread(time_scale=SIM_TIME_SCALE, max_num_seqs=512) as running:
        yield running


@pytest.fixture
def gateway_factory(profile_path: Path) -> Iterator[GatewayFactory]:
    """Start real gateways (uvicorn on a free port); all stop at the end of the test."""
    started: list[RunningGateway] = []

    def start(
        backend: str,
        *,
        trace: bool = False,
        transport: Any = None,
        profile: Path | None = None,
        **overrides: Any,
    ) -> RunningGateway:
        settings = settings_for(backend, profile or profile_path, **overrides)
        gw = start_in_thread(settings, trace=trace, transport=transport)
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.stop()


@pytest.fixture
def gateway(gateway_factory: GatewayFactory, sim: RunningSim) -> RunningGateway:
    return gateway_factory(sim.url)
