"""The paper's offline phase, in virtual time: load-vs-speed points from the
engine model, and the speed models fitted to them.

A closed loop keeps exactly L requests in the engine (its ``max_num_seqs`` is
large, as the paper prescribes): each finish is replaced at once. Each request
yields one point, (L, generated tokens / execution time), where execution time
runs from its arrival at the engine to its last token, so prefill is part of it,
as it is part of the SLA. The first L finishes of a level are warm-up (they
started together) and are dropped, and so are the requests still running when
the level's supply ends (they did not run at load L throughout).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from saber.config import TaskType, Workload
from saber.engine import Engine, EnginePreset, EngineRequest
from saber.sim import simulate
from saber.speed import SpeedModel, TTFTFit, fit_model, fit_ttft
from saber.workload import TraceRequest, generate_trace

DEFAULT_LEVELS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)


def closed_loop_points(
    preset: EnginePreset,
    workload: Workload,
    tasks: Mapping[str, TaskType],
    *,
    level: int,
    per_level: int,
    seed: int = 0,
    ttfts: list[tuple[float, float, float, float]] | None = None,
) -> list[tuple[float, float]]:
    """``per_level`` (load, speed) points measured at a constant load ``level``;
    with ``ttfts``, (prompt tokens, level, TTFT, output tokens) of the same requests go
    there too."""
    supply = generate_trace(workload, tasks, rps=1.0, n=per_level + 2 * level, seed=seed)
    engine = Engine(preset, max_num_seqs=max(256, level))
    started: dict[str, float] = {}
    prompts: dict[str, int] = {}
    first: dict[str, float] = {}
    points: list[tuple[float, float]] = []
    now, nxt, warmup = 0.0, 0, level

    def start(at: float) -> None:
        nonlocal nxt
        req = supply[nxt]
        nxt += 1
        engine.add(EngineRequest(req.id, req.prompt_tokens, req.output_tokens, arrival=at))
        started[req.id] = at
        prompts[req.id] = req.prompt_tokens

    for _ in range(level):
        start(now)
    while not engine.idle and nxt < len(supply):
        res = engine.step(now, max_steps=1 << 30)
        assert res is not None
        now = res.end
        first.update(res.first_tokens)
        for done in res.finished:
            if warmup:
                warmup -= 1
            else:
                points.append((float(level), done.output_tokens / (now - started[done.id])))
                if ttfts is not None and len(points) <= per_level:
                    at = started[done.id]
                    ttfts.append(
                        (prompts[done.id], float(level), first[done.id] - at, done.output_tokens)
                    )
            if nxt < len(supply):
                start(now)
    return points[:per_level]


def profile_engine(
    preset: EnginePreset,
    workload: Workload,
    tasks: Mapping[str, TaskType],
    *,
    levels: Sequence[int] = DEFAULT_LEVELS,
    points: int = 1000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """About ``points`` (load, speed) points spread evenly over ``levels``."""
    per_level = max(8, points // len(levels))
    rows: list[tuple[float, float]] = []
    for i, level in enumerate(levels):
        rows += closed_loop_points(
            preset, workload, tasks, level=level, per_level=per_level, seed=seed + i
        )
    arr = np.asarray(rows, dtype=float)
    return arr[:, 0], arr[:, 1]


def engine_profile(
    preset: EnginePreset, workload: Workload, tasks: Mapping[str, TaskType], *, points: int = 1000
) -> tuple[SpeedModel, TTFTFit | None]:
    """What saber-profile would fit on this engine: USL and the TTFT fit."""
    models, ttft = engine_profiles(preset, workload, tasks, ("usl",), points=points)
    return models["usl"], ttft


def engine_profiles(
    preset: EnginePreset,
    workload: Workload,
    tasks: Mapping[str, TaskType],
    kinds: Sequence[str],
    *,
    points: int = 1000,
) -> tuple[dict[str, SpeedModel], TTFTFit | None]:
    """``engine_profile``'s points, each speed model of ``kinds`` fitted to them."""
    per_level = max(8, points // len(DEFAULT_LEVELS))
    rows: list[tuple[float, float]] = []
    ttfts: list[tuple[float, float, float, float]] = []
    for i, level in enumerate(DEFAULT_LEVELS):
        rows += closed_loop_points(
            preset, workload, tasks, level=level, per_level=per_level, seed=i, ttfts=ttfts
        )
    speed = np.asarray(rows, dtype=float)
    ttft = np.asarray(ttfts, dtype=float)
    return (
        fit_variants(speed[:, 0], speed[:, 1], kinds),
        fit_ttft(ttft[:, 0], ttft[:, 1], ttft[:, 2], ttft[:, 3]),
    )


def saturation_rate(
    preset: EnginePreset,
    workload: Workload,
    tasks: Mapping[str, TaskType],
    *,
    max_num_seqs: int = 256,
    requests: int = 1024,
    seed: int = 0,
) -> float:
    """The rate (requests/s) at which vLLM alone saturates: ``requests`` of the
    workload all arrive at t=0 at an engine with ``max_num_seqs``, and this is its
    completions per second while its queue is still full (from the 10th percentile
    completion to the one after which no request is left waiting). SLAs play no part."""
    trace = generate_trace(workload, tasks, rps=1.0, n=requests, seed=seed)
    return burst_rate(preset, trace, tasks, max_num_seqs=max_num_seqs)


def burst_rate(
    preset: EnginePreset,
    requests: Sequence[TraceRequest],
    tasks: Mapping[str, TaskType],
    *,
    max_num_seqs: int = 256,
) -> float:
    """``saturation_rate`` of any requests (a recorded trace's): all of them at t=0."""
    n = len(requests)
    if n < 2 * max_num_seqs:
        raise ValueError("the burst must be at least twice max_num_seqs")
    burst = [dataclasses.replace(r, arrival=0.0) for r in requests]
    result = simulate(burst, Engine(preset, max_num_seqs=max_num_seqs), tasks=tasks)
    done = sorted(r.finished_at for r in result.records if r.finished_at is not None)
    first, last = n // 10, n - max_num_seqs
    return (last - first) / (done[last] - done[first])


def fit_variants(
    loads: np.ndarray, speeds: np.ndarray, kinds: Sequence[str]
) -> dict[str, SpeedModel]:
    return {kind: fit_model(kind, loads, speeds) for kind in kinds}
