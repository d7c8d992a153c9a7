"""Where a pool's misses are, request by request: which kinds of replica could serve each
request in time alone, and what each way of serving the pool made of it.

    .venv/bin/python bench/pool_misses.py --workload W1 --multiples 0.5,1 --seeds 10 \\
        [--seed-base 13000] [--pool 2xa10-qwen2.5-coder-3b,1xa100-40gb-qwen2.5-coder-3b] \\
        [--policies saber,queue-kv] [--mode realistic] [--requests N]

The traces, loads and policies are those of ``saber-bench cluster`` (the same seeds give
the same traces). Each request is also served alone on an idle replica of each kind in
the pool (the bench's ceiling, kind by kind), and grouped by the kinds on which it makes
its SLA alone: on every kind, on some only, or on none (which no policy can meet).
Per load and group it prints how many requests there are, how many each policy met, and
how many each placed on each kind. docs/bench.md ("Pools of replicas") quotes it.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import get_args

from saber.bench._grid import shipped_tasks
from saber.bench.cluster.run import (
    POOL,
    REQUESTS_PER_REPLICA,
    fresh_engines,
    met_alone,
    parse_pool,
    policies,
    replica_fit,
    replica_rate,
)
from saber.config import load_workloads
from saber.engine import PRESETS
from saber.workload import Mode, generate_trace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default=POOL, help=f"COUNTxPRESET,... (default {POOL})")
    parser.add_argument("--workload", default="W1")
    parser.add_argument("--multiples", default="0.5,1", help="of the pool's capacity")
    parser.add_argument("--policies", default="saber,queue-kv")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--seed-base", type=int, default=13000)
    parser.add_argument("--requests", type=int, help="per trace (default 100 per replica)")
    parser.add_argument("--mode", choices=get_args(Mode), default="realistic")
    args = parser.parse_args(argv)

    pool = parse_pool(args.pool)
    unknown = sorted(set(pool) - set(PRESETS))
    if unknown:
        parser.error(f"unknown engine preset(s): {', '.join(unknown)}")
    serve = policies(oracle=args.mode == "oracle")
    chosen = [p.strip() for p in args.policies.split(",") if p.strip()]
    for name in chosen:
        if name not in serve:
            parser.error(f"unknown policy {name!r}; known: {', '.join(serve)}")
    tasks = shipped_tasks()
    workloads = load_workloads(tasks=tasks)
    if args.workload not in workloads:
        parser.error(f"unknown workload {args.workload!r}")
    kinds = list(dict.fromkeys(pool))
    fits = {k: replica_fit(PRESETS[k], workloads, tasks) for k in kinds}
    rate = {k: replica_rate(PRESETS[k], workloads[args.workload], tasks) for k in kinds}
    capacity = sum(rate[p] for p in pool)
    n = args.requests if args.requests is not None else REQUESTS_PER_REPLICA * len(pool)
    print(
        f"{args.workload} on {args.pool} (capacity {capacity:.1f} requests/s), {args.mode} "
        f"mode, {args.seeds} traces of {n} requests a load (seeds {args.seed_base}.."
        f"{args.seed_base + args.seeds - 1})\n"
    )
    placed_on = " / ".join(kinds)
    head = "".join(f" {p}: met | {p}: placed ({placed_on}) |" for p in chosen)
    print(f"| load | makes its SLA alone on | requests |{head}")
    print("|---|---|---|" + "---|---|" * len(chosen))
    for multiple in (float(m) for m in args.multiples.split(",")):
        counts = Counter[tuple[str, str]]()
        groups: dict[str, None] = {}
        for i in range(args.seeds):
            trace = generate_trace(
                workloads[args.workload],
                tasks,
                rps=multiple * capacity,
                n=n,
                seed=args.seed_base + i,
                mode=args.mode,
            )
            alone = {k: met_alone(trace, PRESETS[k], tasks) for k in kinds}
            group = [
                " + ".join(k for k in kinds if alone[k][j]) or "none" for j in range(len(trace))
            ]
            for g in group:
                counts[(g, "requests")] += 1
                groups.setdefault(g)
            for name in chosen:
                engines = fresh_engines([PRESETS[p] for p in pool])
                result = serve[name](trace, engines, tasks, [fits[p] for p in pool])
                for g, record in zip(group, result.records, strict=True):
                    counts[(g, f"{name}: met")] += record.met_sla
                    where = result.served_by.get(record.id)
                    if where is not None:
                        counts[(g, f"{name}: {pool[where]}")] += 1
        for g in sorted(groups, key=lambda g: (g == "none", -g.count("+"), g)):
            cells = "".join(
                f" {counts[(g, f'{p}: met')]} | "
                + " / ".join(str(counts[(g, f"{p}: {k}")]) for k in kinds)
                + " |"
                for p in chosen
            )
            print(f"| {multiple:g}x | {g} | {counts[(g, 'requests')]} |{cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
