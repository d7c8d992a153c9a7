"""Run the cells of a sweep, in parallel processes, with a progress bar."""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from saber.bench._grid import Cell, Sweep, parse_variant
from saber.bench._progress import progress_bar
from saber.config import TaskType, Workload
from saber.engine import Engine, get_preset
from saber.scheduler import Scheduler
from saber.sim import SimResult, simulate
from saber.speed import MODELS, SpeedModel
from saber.workload import generate_trace


@dataclass(frozen=True)
class RunStats:
    """What the report needs of one run: goodput and completion-time/SLA ratios."""

    goodput: float
    ratios: np.ndarray  # e2e / SLA per request; inf for one never served
    task_goodput: dict[str, float]


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
    )


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
        runs[f"static:{b}"] = summarize(
            simulate(trace, Engine(preset, max_num_seqs=b), tasks=tasks)
        )
    for variant in sweep.variants:
        kind, options = parse_variant(variant)
        scheduler = Scheduler(models[kind], sweep.policy(**options), tasks=tasks, seed=cell.seed)
        engine = Engine(preset, max_num_seqs=sweep.saber_max_num_seqs)
        result = simulate(
            trace, engine, tasks=tasks, scheduler=scheduler, trust_max_tokens=cell.mode == "oracle"
        )
        runs[f"saber:{variant}"] = summarize(result)
    return CellResult(cell, runs)


# Worker processes rebuild their inputs once, from plain data.
_WORKER: dict[str, object] = {}


def _init_worker(sweep, tasks, workloads, model_params) -> None:
    _WORKER.update(
        sweep=sweep,
        tasks=tasks,
        workloads=workloads,
        models={k: MODELS[k].from_params(**p) for k, p in model_params.items()},
    )


def _run_in_worker(cell: Cell) -> CellResult:
    w = _WORKER
    return run_cell(cell, w["sweep"], w["tasks"], w["workloads"], w["models"])  # type: ignore[arg-type]


def run_sweep(
    sweep: Sweep,
    tasks: Mapping[str, TaskType],
    workloads: Mapping[str, Workload],
    models: Mapping[str, SpeedModel],
    *,
    jobs: int | None = None,
    progress: bool = True,
) -> list[CellResult]:
    cells = sweep.cells()
    jobs = jobs or os.cpu_count() or 1
    params = {k: dict(m.params) for k, m in models.items()}
    out: list[CellResult] = []
    with progress_bar(len(cells), "simulating", enabled=progress) as advance:
        if jobs == 1:
            _init_worker(sweep, tasks, workloads, params)
            for cell in cells:
                out.append(_run_in_worker(cell))
                advance()
        else:
            with ProcessPoolExecutor(
                jobs, initializer=_init_worker, initargs=(sweep, tasks, workloads, params)
            ) as pool:
                for result in pool.map(_run_in_worker, cells, chunksize=1):
                    out.append(result)
                    advance()
    return out
