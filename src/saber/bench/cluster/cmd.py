"""``saber-bench cluster``: a pool of replicas, each way of serving it on the same traces."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import get_args

from rich.console import Console

from saber.bench._args import csv
from saber.bench._goodput import goodput_argument, goodput_tasks
from saber.bench._grid import shipped_tasks
from saber.bench.cluster.plots import goodput_vs_load
from saber.bench.cluster.report import markdown, table, to_json
from saber.bench.cluster.run import (
    MULTIPLES,
    POOL,
    ClusterBench,
    parse_pool,
    policies,
    run_cluster,
    with_gateways,
    with_overrides,
)
from saber.config import load_workloads
from saber.engine import PRESETS
from saber.workload import Mode


def _pool(text: str) -> tuple[str, ...]:
    try:
        return parse_pool(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser(
        "cluster",
        help="a pool of engine replicas: routers, and the gateway's admission and placement",
        description="N replicas of engine presets (the same or mixed), W1/W2/W3 at loads "
        "scaled to the pool's capacity (the sum of its replicas' saturation rates), "
        "realistic mode, the gateway's task types: each trace served by vLLM alone "
        "(max_num_seqs 256) on every replica, behind each router. Prints goodput per load "
        "and where each router sent the requests; --out writes results.json, results.md "
        'and a PNG. See docs/bench.md, "Pools of replicas".',
    )
    c.add_argument(
        "--goodput",
        type=goodput_argument,
        metavar='"ttft:MS tpot:MS e2el:MS"',
        help="SLOs as vLLM's benchmark takes them, for every task in place of its own "
        "(milliseconds, or NAME:Nx of the fastest replica's own time; saber-bench matrix "
        "--help)",
    )
    c.add_argument(
        "--pool",
        type=_pool,
        metavar="POOL",
        help=f"replicas as COUNTxPRESET,... (default {POOL})",
    )
    c.add_argument("--workloads", type=csv(str), help="e.g. W1,W3 (default: all)")
    c.add_argument(
        "--multiples",
        type=csv(float),
        help="loads, as multiples of the pool's saturation rate "
        f"(default {','.join(f'{m:g}' for m in MULTIPLES)})",
    )
    c.add_argument(
        "--policies",
        type=csv(str),
        help=f"which (default all: {', '.join(policies())}); with saber among them, "
        "--gateways adds its multi-gateway variants",
    )
    c.add_argument(
        "--gateways",
        type=csv(int),
        help="numbers of gateways in front of the pool, e.g. 1,2,4 (default 1): each M > 1 "
        "adds 'saber xM' (M gateways, each its own pool, learning of the others only by "
        "scraping the replicas), and 2 also 'saber x2 no-headroom'",
    )
    c.add_argument(
        "--scrape-s",
        type=float,
        help="how often each gateway scrapes every replica's running + waiting (default 0.2)",
    )
    c.add_argument(
        "--headroom",
        type=int,
        help="the saber xM gateways' headroom at each replica, fixed: each then admits at "
        "most headroom // (M - 1) there per scrape (default: derived, no bound)",
    )
    c.add_argument("--seeds", type=int, help="traces per load (default 3)")
    c.add_argument("--seed-base", type=int, help="trace seeds BASE..BASE+seeds-1 (default 13000)")
    c.add_argument(
        "--requests",
        type=int,
        help="requests per trace (default 100 per replica, as the matrix serves one engine)",
    )
    c.add_argument(
        "--mode",
        choices=get_args(Mode),
        help="realistic (default): clients send their task's cap as max_tokens; oracle: "
        "the true length, and the gateway trusts it (routers ignore it)",
    )
    c.add_argument("--jobs", type=int, help="worker processes (default: CPU count)")
    c.add_argument(
        "--format",
        choices=("table", "markdown", "json"),
        default="table",
        help="stdout: table (goodput and shares), markdown (results.md) or json (results.json)",
    )
    c.add_argument("--out", type=Path, help="folder for results.json, results.md and the PNG")
    c.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def _bench_from(args: argparse.Namespace) -> ClusterBench:
    bench = with_overrides(
        ClusterBench(),
        pool=args.pool,
        workloads=args.workloads,
        multiples=args.multiples,
        policies=args.policies,
        seeds=args.seeds,
        seed_base=args.seed_base,
        requests=args.requests,
        gateways=args.gateways,
        scrape_s=args.scrape_s,
        headroom=args.headroom,
        mode=args.mode,
    )
    bench = with_overrides(bench, policies=with_gateways(bench.policies, bench.gateways))
    known = policies(bench.gateways)
    problems = []
    unknown = sorted(set(bench.pool) - set(PRESETS))
    if unknown:
        problems.append(f"unknown preset(s) {', '.join(unknown)}; known: {', '.join(PRESETS)}")
    unknown = sorted(set(bench.policies) - set(known))
    if unknown or not bench.policies:
        problems.append(f"unknown policies {', '.join(unknown)}; known: {', '.join(known)}")
    if not bench.gateways or min(bench.gateways) < 1:
        problems.append("--gateways must be numbers >= 1")
    if not bench.scrape_s > 0:
        problems.append("--scrape-s must be > 0")
    if bench.headroom is not None and bench.headroom < 0:
        problems.append("--headroom must be >= 0")
    if not bench.multiples or min(bench.multiples) <= 0:
        problems.append("--multiples must be positive numbers")
    if bench.seeds < 1 or bench.trace_requests < 1:
        problems.append("--seeds and --requests must be >= 1")
    if problems:
        raise SystemExit("saber-bench: " + "; ".join(problems))
    return bench


def cmd_cluster(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    bench = _bench_from(args)
    tasks = shipped_tasks()
    workloads = load_workloads(tasks=tasks)
    missing = set(bench.workloads) - set(workloads)
    if missing:
        raise SystemExit(f"saber-bench: unknown workload(s): {', '.join(sorted(missing))}")
    started = time.perf_counter()
    presets = {p: PRESETS[p] for p in bench.pool}
    # Scales of the engine's own times read the pool's fastest replica: the best it gives.
    fastest = max(presets.values(), key=lambda p: p.decode_speed(1, 1000))
    tasks = goodput_tasks(tasks, args.goodput, fastest, workloads["W3"])
    run = run_cluster(
        bench, presets, tasks, workloads, jobs=args.jobs, progress=not args.no_progress
    )
    for name, rates in run.rates.items():
        caps = ", ".join(f"{w} {c:.3g}" for w, c in rates.items())
        err.print(f"{name}: vLLM alone saturates at {caps} requests/s")
    if args.format == "json" or args.out:
        data = to_json(run)
    if args.format == "table":
        print(table(run))
    else:
        print(data if args.format == "json" else markdown(run))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(data)
        (args.out / "results.md").write_text(markdown(run))
        err.print(f"wrote {goodput_vs_load(run, args.out / 'cluster_goodput.png')}")
    err.print(
        f"{len(run.results)} traces, {len(run.results) * len(bench.policies)} runs of "
        f"{bench.trace_requests} requests on {len(bench.pool)} replicas in "
        f"{time.perf_counter() - started:.1f} s"
    )
    return 0
