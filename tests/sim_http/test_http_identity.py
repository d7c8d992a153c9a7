"""saber-sim says what it is in /version, and otherwise still looks like vLLM."""

from __future__ import annotations

import httpx

from saber import __version__
from saber.backend import SIM_ENGINE
from saber.sim.http import RunningSim


def test_version_names_the_engine_next_to_vllms_field(sim: RunningSim) -> None:
    assert httpx.get(f"{sim.url}/version").json() == {
        "version": __version__,
        "engine": SIM_ENGINE,
    }
    # Clients that know vLLM keep seeing vLLM.
    assert httpx.get(f"{sim.api_url}/models").json()["data"][0]["owned_by"] == "vllm"
