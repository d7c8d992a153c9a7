"""Check an engine preset against the paper: Table I's SLAs and the static-B picture.

The paper set each task's SLA to "the mean completion time when serving 100
requests at 10 RPS with Poisson arrivals". ``completion_table`` repeats that
measurement on the simulator (W3 mix, static ``max_num_seqs``), so a preset
whose means land near Table I stands for the paper's set-up. ``goodput_grid``
sweeps static batch sizes the way the paper's Figure 1 does.

    python -m saber.sim.calibrate                # the figures in docs/engine.md
    python -m saber.sim.calibrate --preset a10-qwen2.5-coder-3b --seeds 5
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from saber.config import load_tasks, load_workloads
from saber.engine import Engine, EnginePreset, get_preset
from saber.sim._virtual import simulate
from saber.workload import generate_trace

# The measurement the paper describes (section III-B), and the batch size we
# assume its engine ran with: "moderate", in the middle of the 10..100 sweep.
CAL_WORKLOAD = "W3"
CAL_RPS = 10.0
CAL_BATCH = 50
CAL_REQUESTS = 100
CAL_SEEDS = range(20)


@dataclass(frozen=True, slots=True)
class TaskRow:
    task: str
    mean_s: float  # mean completion (end-to-end) time over every request of the task
    sla_s: float
    count: int

    @property
    def error(self) -> float:
        """Relative error of the mean against the SLA."""
        return self.mean_s / self.sla_s - 1.0


def completion_table(
    preset: EnginePreset,
    *,
    workload: str = CAL_WORKLOAD,
    rps: float = CAL_RPS,
    batch: int = CAL_BATCH,
    n: int = CAL_REQUESTS,
    seeds: Iterable[int] = CAL_SEEDS,
) -> list[TaskRow]:
    """Mean completion time per task, pooled over one static run per seed."""
    tasks = load_tasks()
    mix = load_workloads(tasks=tasks)[workload]
    e2e: dict[str, list[float]] = {name: [] for name in mix.mix}
    for seed in seeds:
        trace = generate_trace(mix, tasks, rps=rps, n=n, seed=seed)
        res = simulate(trace, Engine(preset, max_num_seqs=batch), tasks=tasks)
        for rec in res.records:
            if rec.e2e is not None:
                e2e[rec.task].append(rec.e2e)
    return [
        TaskRow(name, statistics.fmean(vals), tasks[name].sla_s, len(vals))
        for name, vals in e2e.items()
        if vals
    ]


def goodput_grid(
    preset: EnginePreset,
    *,
    workload: str,
    rps_values: Sequence[float],
    batches: Sequence[int],
    n: int = CAL_REQUESTS,
    seeds: Iterable[int] = range(3),
) -> dict[tuple[float, int], float]:
    """Mean goodput of static runs, keyed by (rps, max_num_seqs)."""
    tasks = load_tasks()
    mix = load_workloads(tasks=tasks)[workload]
    seeds = list(seeds)
    out = {}
    for rps in rps_values:
        traces = [generate_trace(mix, tasks, rps=rps, n=n, seed=s) for s in seeds]
        for batch in batches:
            out[rps, batch] = statistics.fmean(
                simulate(t, Engine(preset, max_num_seqs=batch), tasks=tasks).goodput()
                for t in traces
            )
    return out


def _max_running(preset: EnginePreset, n: int) -> int:
    tasks = load_tasks()
    mix = load_workloads(tasks=tasks)[CAL_WORKLOAD]
    trace = generate_trace(mix, tasks, rps=CAL_RPS, n=n, seed=0)
    return simulate(trace, Engine(preset, max_num_seqs=256), tasks=tasks).max_running


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m saber.sim.calibrate", description=__doc__)
    parser.add_argument("--preset", default="paper")
    parser.add_argument("--batch", type=int, default=CAL_BATCH)
    parser.add_argument("--requests", type=int, default=CAL_REQUESTS)
    parser.add_argument("--seeds", type=int, default=len(CAL_SEEDS))
    args = parser.parse_args(argv)
    preset = get_preset(args.preset)

    rows = completion_table(preset, batch=args.batch, n=args.requests, seeds=range(args.seeds))
    print(
        f"Mean completion time, {CAL_WORKLOAD} at {CAL_RPS:g} RPS, static max_num_seqs "
        f"{args.batch}, {args.requests} requests x {args.seeds} seeds ({preset.name})\n"
    )
    print("| task | requests | mean completion (s) | SLA (s) | error |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row.task} | {row.count} | {row.mean_s:.2f} | {row.sla_s:g} | {row.error:+.0%} |")

    print(
        f"\nRun length matters: {CAL_WORKLOAD} at {CAL_RPS:g} RPS, max_num_seqs 256, "
        "mean completion (s) by requests per run, 3 seeds\n"
    )
    print("| requests | " + " | ".join(row.task for row in rows) + " | max running |")
    print("|---" * (len(rows) + 2) + "|")
    for n in (100, 300, 1000):
        means = completion_table(preset, batch=256, n=n, seeds=range(3))
        cells = " | ".join(f"{r.mean_s:.2f}" for r in means)
        print(f"| {n} | {cells} | {_max_running(preset, n)} |")

    batches = list(range(10, 101, 10))
    for workload, rps_values in (("W1", (5, 10, 15, 20)), ("W2", (10, 20)), ("W3", (5, 10, 20))):
        grid = goodput_grid(
            preset, workload=workload, rps_values=rps_values, batches=batches, n=args.requests
        )
        print(f"\nGoodput (%), {workload}, static max_num_seqs, {args.requests} requests x 3 seeds")
        print()
        print("| RPS | " + " | ".join(str(b) for b in batches) + " |")
        print("|---" * (len(batches) + 1) + "|")
        for rps in rps_values:
            cells = " | ".join(f"{100 * grid[rps, b]:.0f}" for b in batches)
            print(f"| {rps:g} | {cells} |")


if __name__ == "__main__":
    main()
