"""Helpers for the gateway tests (imported as a module; fixtures live in conftest)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from saber.config import load_gateway_config
from saber.gateway import GatewaySettings, RunningGateway, settings_from_config
from saber.sim.http import RunningSim
from saber.speed import USLModel, build_profile, save_profile

# saber-sim's paper preset does about 63 tokens/s for one request at time scale 1.
SIM_TIME_SCALE = 20.0
# A profile we know: f(1) = 600 tokens/s, falling with load.
KNOWN = USLModel(lam=600.0, sigma=0.1, kappa=0.002)


def write_profile(path: Path, model: USLModel = KNOWN) -> Path:
    loads = np.repeat(np.arange(1, 65, dtype=float), 4)
    prof = build_profile(model, loads, model.predict(loads), backend="sim", model_name="test")
    save_profile(prof, path)
    return path


GatewayFactory = Callable[..., RunningGateway]


def settings_for(backend: str, profile: Path, **overrides: Any) -> GatewaySettings:
    """The shipped gateway.yaml, pointed at ``backend``, with dotted-key overrides."""
    base: dict[str, Any] = {"backend.url": backend, "profile": str(profile), "log_requests": False}
    cfg = load_gateway_config(env={}, overrides={**base, **overrides})
    return settings_from_config(cfg)


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def sim_running(sim: RunningSim) -> float:
    text = httpx.get(sim.url + "/metrics").text
    return metric_value(text, "vllm:num_requests_running")


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def call_in_loop(gw: RunningGateway, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on the gateway's event loop thread and return its result."""
    loop = gw.gateway.admission._loop
    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as exc:  # pragma: no cover
            fut.set_exception(exc)

    loop.call_soon_threadsafe(run)
    assert isinstance(loop, asyncio.AbstractEventLoop)
    return fut.result(timeout=5)
