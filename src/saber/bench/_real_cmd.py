"""``saber-bench real``: the real loop on a live engine and a live gateway in front of it."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from saber import wire
from saber.backend import BackendError, BackendKind, detect_kind
from saber.bench._real import RunResult, drained, replay, short_sla_tasks
from saber.config import (
    DEFAULT_CONFIG_DIR,
    ConfigError,
    TaskType,
    load_workloads,
    parse_tasks,
    read_yaml,
)
from saber.workload import generate_trace


def add_parser(sub: argparse._SubParsersAction) -> None:
    real = sub.add_parser(
        "real",
        help="one seeded stream, in real time, through the gateway and straight to the engine",
        description="Replay the same seeded open-loop stream against a live engine twice: "
        "through saber-gateway, then straight to the engine (or the other way round). Prints "
        "what the engine held in flight and the share of requests within their SLA, per run.",
    )
    real.add_argument("--engine", required=True, metavar="URL", help="the engine, without /v1")
    real.add_argument("--gateway", required=True, metavar="URL", help="the gateway, without /v1")
    real.add_argument("--model", required=True, help="the engine's model name")
    real.add_argument(
        "--tasks",
        type=Path,
        default=DEFAULT_CONFIG_DIR / "tasks.yaml",
        help="YAML with a tasks: section (a gateway config will do); its SLAs must be the "
        "gateway's (default: the shipped configs/tasks.yaml)",
    )
    real.add_argument("--workload", default="W3", help="task mix (default W3)")
    real.add_argument("--rps", type=float, default=8.0, help="Poisson arrival rate (default 8)")
    real.add_argument("--requests", type=int, default=120, help="requests per run (default 120)")
    real.add_argument("--seed", type=int, default=0, help="trace seed (default 0)")
    real.add_argument("--api-key", help="the gateway's client key, if it asks for one")
    real.add_argument(
        "--first", choices=("direct", "gateway"), default="direct", help="which run goes first"
    )
    real.add_argument("--timeout", type=float, default=120.0, help="per request, s (default 120)")
    real.add_argument("--format", choices=("table", "json"), default="table")
    real.add_argument("--out", type=Path, help="write summaries and every request here (JSON)")


def load_task_section(path: Path) -> dict[str, TaskType]:
    """The ``tasks:`` of a tasks file or of a gateway config."""
    data = read_yaml(path)
    tasks = data.get("tasks") if isinstance(data, dict) else None
    return parse_tasks({"tasks": tasks}, path)


async def _gateway_slas(url: str, api_key: str | None) -> dict[str, float]:
    headers = wire.auth_headers(api_key)
    async with httpx.AsyncClient(timeout=10.0, headers=headers) as client:
        resp = await client.get(url.rstrip("/") + "/saber/status")
    resp.raise_for_status()
    return {name: t["sla_s"] for name, t in resp.json()["tasks"].items()}


async def run_real(args: argparse.Namespace, err: Console) -> tuple[list[RunResult], set[str]]:
    tasks = load_task_section(args.tasks)
    workloads = load_workloads(tasks=tasks)
    if args.workload not in workloads:
        raise SystemExit(f"saber-bench: unknown workload {args.workload!r}")
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            kind: BackendKind = await detect_kind(client, args.engine)
        slas = await _gateway_slas(args.gateway, args.api_key)
    except (BackendError, httpx.HTTPError, KeyError, ValueError) as exc:
        raise SystemExit(f"saber-bench: cannot reach the engine or the gateway: {exc}") from None
    trace = generate_trace(
        workloads[args.workload], tasks, rps=args.rps, n=args.requests, seed=args.seed
    )
    differ = {
        t: (tasks[t].sla_s, slas.get(t))
        for t in workloads[args.workload].mix
        if slas.get(t) is None or not math.isclose(tasks[t].sla_s, slas[t], rel_tol=1e-6)
    }
    if differ:
        raise SystemExit(
            f"saber-bench: {args.tasks} and the gateway disagree on SLAs "
            f"(task: (file, gateway)): {differ}; give --tasks the gateway's config"
        )
    order = ["direct", "gateway"] if args.first == "direct" else ["gateway", "direct"]
    results = []
    for name in order:
        if not await drained(args.engine, kind):
            raise SystemExit(f"saber-bench: the engine at {args.engine} is still busy after 120 s")
        err.print(f"{name}: {len(trace)} requests at {args.rps:g}/s ({kind} engine)")
        via_gateway = name == "gateway"
        results.append(
            await replay(
                name,
                trace,
                tasks,
                url=args.gateway if via_gateway else args.engine,
                model=args.model,
                engine_url=args.engine,
                engine_kind=kind,
                via_gateway=via_gateway,
                api_key=args.api_key if via_gateway else None,
                request_timeout_s=args.timeout,
            )
        )
    return results, short_sla_tasks(trace, tasks)


def cmd_real(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        results, short = asyncio.run(run_real(args, err))
    except ConfigError as exc:
        raise SystemExit(f"saber-bench: {exc}") from None
    summaries = [r.summary(short) for r in results]
    if args.format == "json":
        print(json.dumps(summaries, indent=2))
    else:
        Console().print(_table(summaries, short))
    if args.out:
        doc = {"short_sla_tasks": sorted(short), "summaries": summaries}
        doc["runs"] = [r.to_dict() for r in results]
        args.out.write_text(json.dumps(doc, indent=2))
        err.print(f"wrote {args.out}")
    return 0


def _table(summaries: list[dict], short: set[str]) -> Table:
    table = Table(title=f"the real loop (short-SLA tasks: {', '.join(sorted(short))})")
    columns = {
        "run": "{}",
        "requests": "{}",
        "errors": "{}",
        "engine_in_flight_mean": "{:.1f}",
        "engine_in_flight_max": "{:.0f}",
        "goodput": "{:.1%}",
        "short_sla_goodput": "{:.1%}",
        "duration_s": "{:.1f}",
    }
    for col in columns:
        table.add_column(col.replace("_", " "), justify="left" if col == "run" else "right")
    for s in summaries:
        table.add_row(*(fmt.format(s[col]) for col, fmt in columns.items()))
    return table
