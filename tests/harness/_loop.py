"""The real loop on a live engine: profile it, set SLAs for its speed, put a gateway in
front with the profile just fitted, and replay one stream above capacity both ways.

The paper's SLAs (Table I) were set for a GPU; on a tiny model on 2 cores they would
be met by everything or by nothing. So the task types are rescaled (``rescale_tasks``):
output lengths times ``output_scale``, and each SLA is met up to the same load on this
engine as on the paper's (the shipped saber-sim profile). Prompts shrink more
(``input_scale``): a CPU prefills a tiny model slowly next to how it decodes, which a
GPU does not, and long prompts would make TTFT the whole story.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from harness._gateway import start_gateway
from harness._process import EngineProcess
from saber.bench import RealComparison, rescale_tasks, run_real
from saber.config import DEFAULT_PROFILE_DIR, TaskType, load_tasks, load_workloads
from saber.profile import profile_backend
from saber.speed import Profile, load_profile
from saber.workload import TraceRequest, generate_trace

REFERENCE_PROFILE = DEFAULT_PROFILE_DIR / "saber-sim-paper.json"  # the engine Table I fits
USEFUL_S = 40.0
"""How long a replayed request's answer is wanted (s), at least; a task with a longer
SLA keeps its SLA as its useful_s."""
# A slow engine can be overwhelmed for minutes: the gateway waits that long for it, and
# so does the replay's client. Best effort has no deadline: a long answer admitted at
# 4x capacity runs at a few tokens/s (768 tokens of code_translation at the 3.2
# tokens/s of 32 in flight: 240 s), and one seen took 102 s of the 120 s the client
# used to wait; a client that gave up sooner counted it as lost.
TIMEOUT_S = 300.0
GATEWAY_SETTINGS = {"backend": {"read_timeout_s": TIMEOUT_S, "connect_timeout_s": 30.0}}


@dataclass
class LoopReport:
    profile: Profile
    rps: float
    capacity_rps: float
    tasks: dict[str, TaskType]
    real: RealComparison  # both replays (saber-bench real)
    status: dict[str, Any]  # the gateway's /saber/status at the end of its run

    def summary(self, run: str) -> dict[str, Any]:
        return self.real.summary(run)


def capacity_rps(profile: Profile, trace: list[TraceRequest]) -> float:
    """Requests/s of this trace the engine can finish at best: the highest aggregate speed
    it was measured at (load x mean speed, per level profiled) over the trace's own mean
    output length. Measured, not fitted: a fit that bends the wrong way at the top
    would move the rate, and with it how far past capacity the run goes."""
    peak = max(level.load * level.mean_speed for level in profile.points.levels)
    return peak / float(np.mean([r.output_tokens for r in trace]))


def write_tasks(tasks: dict[str, TaskType], path: Path, **settings: Any) -> Path:
    body = {name: t.model_dump(exclude={"name"}, exclude_none=True) for name, t in tasks.items()}
    path.write_text(yaml.safe_dump({**settings, "tasks": body}, sort_keys=False))
    return path


def real_loop(
    engine: EngineProcess,
    workdir: Path,
    *,
    workload: str = "W3",
    input_scale: float = 0.1,
    output_scale: float = 0.5,
    levels: tuple[int, ...] = (1, 2, 4, 8, 16, 32),
    requests_per_level: int = 20,
    overload: float = 4.0,
    requests: int = 100,
    seed: int = 0,
    profile: Path | None = None,
    settings: dict[str, Any] | None = None,
) -> LoopReport:
    """Profile ``engine`` (or take ``profile``, made by an earlier run on the same engine
    and scales), start a gateway with that profile, rescaled SLAs and ``settings`` (its
    config file's keys), and replay one stream (``saber.bench.run_real``) at ``overload``
    times the profiled capacity. The gateway is stopped on the way out; the engine is
    left running."""
    workdir.mkdir(parents=True, exist_ok=True)
    paper = load_tasks()
    workloads = load_workloads(tasks=paper)
    if profile is None:
        sized = rescale_tasks(paper, input_scale=input_scale, output_scale=output_scale)
        profile = workdir / "profile.json"
        profile_backend(
            engine.base_url,
            engine.model,
            profile,
            workload=workload,
            tasks=sized,
            levels=levels,
            requests_per_level=requests_per_level,
        )
    fitted = load_profile(profile)
    tasks = rescale_tasks(
        paper,
        input_scale=input_scale,
        output_scale=output_scale,
        reference=load_profile(REFERENCE_PROFILE).speed_model(),
        target=fitted.speed_model(),
        max_load=fitted.points.load_max,
    )
    # The paper's tasks set no useful_s: the gateway would then hold a demoted request as
    # long as it takes (seen: 4 of 100 timed out waiting). A deployment sets useful_s
    # well below its clients' timeout, as here: USEFUL_S against TIMEOUT_S.
    tasks = {
        name: task.model_copy(update={"useful_s": max(USEFUL_S, task.sla_s)})
        for name, task in tasks.items()
    }
    config = write_tasks(tasks, workdir / "gateway.yaml", **GATEWAY_SETTINGS | (settings or {}))
    # The arrivals scale with the rate; the tasks and lengths drawn do not.
    trace = generate_trace(workloads[workload], tasks, rps=1.0, n=requests, seed=seed)
    capacity = capacity_rps(fitted, trace)
    rps = overload * capacity
    gateway = start_gateway(engine, profile, config=config)
    try:
        real = run_real(
            engine.base_url,
            gateway.url,
            engine.model,
            tasks,
            workload=workload,
            rps=rps,
            requests=requests,
            seed=seed,
            timeout_s=TIMEOUT_S,
        )
        status = httpx.get(gateway.url + "/saber/status", timeout=10.0).raise_for_status().json()
    finally:
        gateway.stop()
    (workdir / "real.json").write_text(json.dumps(real.to_dict(), indent=2))
    return LoopReport(fitted, rps, capacity, tasks, real, status)
