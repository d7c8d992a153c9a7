"""Why faithful SABER trails static B on W3: demotions, waits and the window.

    .venv/bin/python bench/saber_diagnosis.py [--workload W3] [--rps 10] [--seeds 10]

Prints, for the same traces, the best static B against SABER with window 8 and 32,
and for SABER how many requests were infeasible on arrival (tokens/SLA > f(1))
against how many were demoted after waiting, with their mean HPQ wait; then the
same for each protection rule beyond the paper (Policy.protection), window 8, and
for line 10 read literally ("none").
"""

from __future__ import annotations

import argparse
import statistics

from saber.bench import Sweep, profile_engine
from saber.config import load_tasks, load_workloads
from saber.engine import Engine, get_preset
from saber.scheduler import Scheduler
from saber.sim import simulate
from saber.speed import fit_model
from saber.workload import generate_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="W3")
    parser.add_argument("--rps", type=float, default=10.0)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    tasks = load_tasks()
    workloads = load_workloads(tasks=tasks)
    preset = get_preset("paper")
    model = fit_model("usl", *profile_engine(preset, workloads["W3"], tasks))
    f1 = model(1)
    traces = [
        generate_trace(workloads[args.workload], tasks, rps=args.rps, n=100, seed=1000 + s)
        for s in range(args.seeds)
    ]

    def saber(trace, window: int, protection: str = "frozen"):
        sched = Scheduler(model, Sweep().policy(window_size=window, protection=protection), seed=0)
        engine = Engine(preset, max_num_seqs=256)
        return simulate(trace, engine, tasks=tasks, scheduler=sched, trust_max_tokens=True)

    static = {
        b: statistics.fmean(
            simulate(t, Engine(preset, max_num_seqs=b), tasks=tasks).goodput() for t in traces
        )
        for b in range(10, 101, 10)
    }
    best = max(static, key=static.get)
    runs = {w: [saber(t, w) for t in traces] for w in (8, 32)}
    print(f"{args.workload} at {args.rps:g} RPS, {args.seeds} traces of 100 requests")
    print(f"best static B={best}: goodput {100 * static[best]:.1f}%")
    for w, results in runs.items():
        print(
            f"SABER window {w}: goodput {100 * statistics.fmean(r.goodput() for r in results):.1f}%"
        )

    def demotions(results) -> None:
        infeasible = demoted = 0
        waits = []
        for trace, result in zip(traces, results, strict=True):
            hopeless = {r.id for r in trace if r.max_tokens / tasks[r.task].sla_s > f1}
            infeasible += len(hopeless)
            for rec in result.records:
                if rec.demoted and rec.id not in hopeless:
                    demoted += 1
                if rec.admitted_at is not None and not rec.demoted:
                    waits.append(rec.admitted_at - rec.arrival)
        n = 100 * args.seeds
        print(
            f"  per 100 requests: {100 * infeasible / n:.1f} infeasible on arrival, "
            f"{100 * demoted / n:.1f} demoted after waiting"
        )
        print(f"  mean HPQ wait of requests admitted from the HPQ: {statistics.fmean(waits):.2f} s")

    demotions(runs[8])
    for protection in ("progress", "value", "none"):
        results = [saber(t, 8, protection) for t in traces]
        mean = statistics.fmean(r.goodput() for r in results)
        print(f"SABER window 8, protection={protection}: goodput {100 * mean:.1f}%")
        demotions(results)


if __name__ == "__main__":
    main()
