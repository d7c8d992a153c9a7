"""``saber-bench real``: the real loop on a live engine and a live gateway in front of it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from saber.bench.real._run import RealRunError, run_real
from saber.config import DEFAULT_GATEWAY_CONFIG, ConfigError, TaskType, parse_tasks, read_yaml


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
        default=DEFAULT_GATEWAY_CONFIG,
        metavar="FILE",
        help="YAML with a tasks: section, whose SLOs must be the gateway's (default: the "
        "shipped configs/gateway.yaml, what a gateway serves by default)",
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


def cmd_real(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        result = run_real(
            args.engine,
            args.gateway,
            args.model,
            load_task_section(args.tasks),
            workload=args.workload,
            rps=args.rps,
            requests=args.requests,
            seed=args.seed,
            api_key=args.api_key,
            first=args.first,
            timeout_s=args.timeout,
            say=err.print,
        )
    except (ConfigError, RealRunError) as exc:
        raise SystemExit(f"saber-bench: {exc}") from None
    summaries = result.summaries()
    if args.format == "json":
        print(json.dumps(summaries, indent=2))
    else:
        Console().print(_table(summaries, result.short_sla_tasks))
    if args.out:
        args.out.write_text(json.dumps(result.to_dict(), indent=2))
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
