"""Run the cells of a sweep, in parallel processes, with a progress bar."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from saber.bench._grid import Cell, Sweep, with_default
from saber.bench._pool import parallel_map
from saber.config import TaskType, Workload
from saber.engine import Engine, EnginePreset, EngineRequest, get_preset
from saber.scheduler import Policy, Scheduler, TTFTFn
from saber.sim import SimRecord, SimResult, judged_by, own_slo, simulate
from saber.speed import SpeedModel
from saber.workload import TraceRequest, generate_trace


@dataclass(frozen=True)
class RunStats:
    """What the report needs of one run: goodput and completion-time/SLA ratios."""

    goodput: float
    ratios: np.ndarray  # e2e / SLA per request; inf for one never served
    task_goodput: dict[str, float]
    refused: float = 0.0  # share never served: rejected, or still waiting at the end


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    runs: dict[str, RunStats]  # "static:B" or "saber:<variant>"


def summarize(result: SimResult) -> RunStats:
    ratios = np.array(
        [r.e2e / r.sla_s if r.e2e is not None else np.inf for r in result.records],
        dtype=float,
    )
    return RunStats(
        goodput=result.goodput(),
        ratios=ratios,
        task_goodput={t: result.goodput(t) for t in result.tasks()},
        refused=refused_share(result),
    )


def refused_share(result: SimResult) -> float:
    """The share of a run's requests never served: rejected, or still waiting at the end."""
    refused = sum(r.rejected for r in result.records) + len(result.unfinished)
    return refused / len(result.records) if result.records else 0.0


def rescore(records: Sequence[SimRecord], tasks: Mapping[str, TaskType]) -> list[SimRecord]:
    """Records judged by ``tasks``' SLAs, whatever the run was scheduled by."""
    return [
        dataclasses.replace(
            r,
            sla_s=tasks[r.task].sla_s,
            sla_kind=tasks[r.task].sla_kind,
            slo=judged_by(tasks[r.task]),
        )
        for r in records
    ]


def serve_static(
    trace: Sequence[TraceRequest],
    preset: EnginePreset,
    max_num_seqs: int,
    tasks: Mapping[str, TaskType],
) -> SimResult:
    """vLLM alone: every request straight to an engine with ``max_num_seqs``."""
    return simulate(trace, Engine(preset, max_num_seqs=max_num_seqs), tasks=tasks)


def serve_alone(
    trace: Sequence[TraceRequest], preset: EnginePreset, tasks: Mapping[str, TaskType]
) -> SimResult:
    """Each request on an idle engine of its own, from its arrival. A request is never
    faster than alone, so no scheduler meets more SLAs on this trace: the ceiling that
    tells a gain the gateway misses from one that is not there."""
    records = []
    for r in trace:
        first, last = alone_times(preset, r.prompt_tokens, r.output_tokens)
        task = tasks[r.task]
        records.append(
            SimRecord(
                id=r.id,
                task=r.task,
                arrival=r.arrival,
                sla_s=task.sla_s,
                admitted_at=r.arrival,
                started_at=r.arrival,
                first_token_at=r.arrival + first,
                finished_at=r.arrival + last,
                output_tokens=r.output_tokens,
                preemptions=0,
                demoted=False,
                rejected=False,
                sla_kind=task.sla_kind,
                slo=judged_by(task, own_slo(r)),
            )
        )
    return SimResult(records)


@functools.lru_cache(maxsize=1 << 16)
def alone_times(
    preset: EnginePreset, prompt_tokens: int, output_tokens: int
) -> tuple[float, float]:
    """Seconds from arrival to the first and the last token on an idle engine. Cached:
    a seed draws the same lengths at every load, so the matrix asks again and again."""
    engine = Engine(preset)
    req = EngineRequest("alone", prompt_tokens, output_tokens)
    engine.add(req)
    while engine.step(0.0, max_steps=1 << 30) is not None:
        pass
    assert req.first_token_at is not None and req.finished_at is not None
    return req.first_token_at, req.finished_at


def serve_saber(
    trace: Sequence[TraceRequest],
    preset: EnginePreset,
    tasks: Mapping[str, TaskType],
    speed: SpeedModel,
    policy: Policy,
    *,
    max_num_seqs: int,
    ttft: TTFTFn | None = None,
    seed: int = 0,
    oracle: bool = False,
    prefill: tuple[float, float] | None = None,
) -> SimResult:
    """SABER with ``policy`` on ``speed`` in front of an engine with ``max_num_seqs``;
    ``oracle``: each request's max_tokens is its true length, and the scheduler is told;
    ``prefill``: the profile's (``TTFTFit.prefill``)."""
    scheduler = Scheduler(speed, policy, tasks=tasks, ttft=ttft, seed=seed, prefill=prefill)
    engine = Engine(preset, max_num_seqs=max_num_seqs)
    return simulate(trace, engine, tasks=tasks, scheduler=scheduler, trust_max_tokens=oracle)


def run_cell(
    cell: Cell,
    sweep: Sweep,
    tasks: Mapping[str, TaskType],
    workloads: Mapping[str, Workload],
    models: Mapping[str, SpeedModel],
) -> CellResult:
    preset = get_preset(sweep.preset)
    trace = generate_trace(
        workloads[cell.workload],
        tasks,
        rps=cell.rps,
        n=sweep.requests,
        seed=sweep.seed_base + cell.seed,
        mode=cell.mode,  # type: ignore[arg-type]
    )
    runs: dict[str, RunStats] = {}
    for b in sweep.batch_sizes:
        runs[f"static:{b}"] = summarize(serve_static(trace, preset, b, tasks))
    for variant in with_default(sweep.variants):
        kind, policy = sweep.variant_policy(variant)
        result = serve_saber(
            trace,
            preset,
            tasks,
            models[kind],
            policy,
            max_num_seqs=sweep.saber_max_num_seqs,
            seed=cell.seed,
            oracle=cell.mode == "oracle",
        )
        runs[f"saber:{variant}"] = summarize(result)
    return CellResult(cell, runs)


def _run_shared(shared: tuple, cell: Cell) -> CellResult:
    return run_cell(cell, *shared)


def run_sweep(
    sweep: Sweep,
    tasks: Mapping[str, TaskType],
    workloads: Mapping[str, Workload],
    models: Mapping[str, SpeedModel],
    *,
    jobs: int | None = None,
    progress: bool = True,
) -> list[CellResult]:
    return parallel_map(
        _run_shared,
        (sweep, tasks, workloads, models),
        sweep.cells(),
        description="simulating",
        jobs=jobs,
        progress=progress,
    )
