"""Helpers for the gateway tests (imported as a module; fixtures live in conftest)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from harness import GENEROUS, metric_value
from saber.config import load_gateway_config
from saber.gateway import GatewaySettings, RunningGateway, settings_from_config
from saber.scheduler import SchedRequest
from saber.sim.http import RunningSim

# saber-sim's paper preset does about 63 tokens/s for one request at time scale 1.
SIM_TIME_SCALE = 20.0
LONG_TOKENS = 30_000
"""An answer a test hangs up on, or queues others behind, while it still runs: about 12 s
of generation at SIM_TIME_SCALE, within saber-sim's max_model_len (32,768). 5,000 tokens
(2 s) ended first on a machine running the suite at 2-3x its usual time, where the
tests' steps take 1-1.5 s."""
# The profile the gateway tests know: the harness's GENEROUS, f(1) = 600 tokens/s, falling.
KNOWN = GENEROUS
UNCAPPED = {"task_max_tokens": "off"}
"""For a gateway that must run an answer longer than its task's cap (LONG_TOKENS, to hold
the engine while others queue): every task's ``max_tokens`` caps its requests otherwise,
however the task was picked (docs/gateway.md, "Task honesty")."""


GatewayFactory = Callable[..., RunningGateway]


def settings_for(backend: str, profile: Path, **overrides: Any) -> GatewaySettings:
    """The shipped gateway.yaml, pointed at ``backend``, with dotted-key overrides."""
    base: dict[str, Any] = {"backend.url": backend, "profile": str(profile), "log_requests": False}
    cfg = load_gateway_config(env={}, overrides={**base, **overrides})
    return settings_from_config(cfg)


def sim_running(sim: RunningSim) -> float:
    text = httpx.get(sim.url + "/metrics").text
    return metric_value(text, "vllm:num_requests_running")


def idle(gw: RunningGateway, sim: RunningSim) -> bool:
    """Nothing held anywhere: no request known to admission, none running or queued in
    the scheduler, none running in saber-sim."""
    s = gw.gateway.scheduler
    return (
        gw.gateway.admission.active == 0
        and s.load == 0
        and s.queued() == 0
        and sim_running(sim) == 0
    )


def held(gw: RunningGateway, sim: RunningSim) -> str:
    """What is held anywhere, for a failed wait for ``idle`` (which is all of it at 0)."""
    s = gw.gateway.scheduler
    return (
        f"nothing held (admission active {gw.gateway.admission.active}, load {s.load}, "
        f"queued {s.queued()}, saber-sim running {sim_running(sim)})"
    )


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


def offered(gw: RunningGateway) -> list[SchedRequest]:
    """The scheduler requests offered so far (a gateway started with ``trace=True``)."""
    trace = gw.gateway.admission.trace or []
    return [e.arg for e in trace if e.call == "offer" and isinstance(e.arg, SchedRequest)]


def start_fake(factory: GatewayFactory, fake: Any, **overrides: Any) -> RunningGateway:
    """A gateway in front of ``fake`` (a MockTransport backend such as FakeVllm): a vLLM
    with one model, its load never read."""
    from fake_vllm import MODEL

    base = {
        "backend.kind": "vllm",
        "backend.model": MODEL,
        "backend.metrics_interval_s": 0,
    }
    return factory("http://vllm.invalid", transport=fake.transport(), **{**base, **overrides})


def requests_total(gw: RunningGateway, outcome: str | None = None) -> float:
    """``saber_requests_total`` (for one outcome, or all), read from the app's registry."""
    total = 0.0
    for family in gw.gateway.metrics.requests.collect():
        for s in family.samples:
            if s.name.endswith("_total") and outcome in (None, s.labels["outcome"]):
                total += s.value
    return total
