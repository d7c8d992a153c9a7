"""``saber-bench matrix``: the shipped policy on every engine preset, not one."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import get_args

from rich.console import Console

from saber.bench._args import check_variants, csv
from saber.bench._engines_file import load_engines
from saber.bench._goodput import goodput_argument
from saber.bench._grid import OPTIONS, shipped_tasks
from saber.bench.matrix.plots import write_heatmaps
from saber.bench.matrix.report import cells_markdown, markdown, summary_markdown, to_json
from saber.bench.matrix.run import GRIDS, Matrix, run_matrix
from saber.bench.matrix.summary import summarize_matrix
from saber.config import ConfigError, load_workloads
from saber.engine import PRESETS, EnginePreset
from saber.workload import Mode

# Wall time on the project's 2-core machine, shared with other work (docs/bench.md).
QUICK_TIME = "4 to 6 minutes"
FULL_TIME = "25 to 35 minutes"


def add_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser(
        "matrix",
        help="the shipped policy against static B and vLLM alone on every engine preset",
        description="Every engine preset x workload x load grid x SLA scale, realistic mode, "
        "the gateway's task types: each trace served by every static max_num_seqs B, vLLM "
        "alone (256), the policy configs/gateway.yaml ships (default) and each --variants "
        "entry, on the profile saber-profile would fit on that engine. Prints the global "
        "summary and one row per cell; --out writes results.json (every per-load figure), "
        f"results.md and heatmaps. On 2 shared cores --quick takes {QUICK_TIME}, the full "
        f'matrix {FULL_TIME}; see docs/bench.md, "The engine matrix".',
    )
    m.add_argument(
        "--quick",
        action="store_true",
        help=f"7 presets slow to fast (the paper's among them), every load, 2 seeds "
        f"({QUICK_TIME} on 2 cores)",
    )
    m.add_argument("--presets", type=csv(str), help="engine presets (default: all shipped)")
    m.add_argument(
        "--engines-file",
        type=Path,
        metavar="F",
        help="YAML list of more engines (name, hardware, model, factors; docs/bench.md); "
        "run as well as --presets' unless --presets names them",
    )
    m.add_argument("--workloads", type=csv(str), help="e.g. W1,W3 (default: all)")
    m.add_argument("--grids", type=csv(str), help=f"load grids (default {','.join(GRIDS)})")
    m.add_argument("--sla-scales", type=csv(float), help="SLA multipliers (default 0.5,1,2)")
    m.add_argument("--rps", type=csv(float), help="the paper grid's RPS (default 1..10,15,20)")
    m.add_argument(
        "--multiples",
        type=csv(float),
        help="the capacity grid's multiples of vLLM alone's saturation rate "
        "(default 0.25,0.5,0.75,1,1.25,1.5,2,2.5)",
    )
    m.add_argument("--batch-sizes", type=csv(int), help="static B values (default 10..100)")
    m.add_argument(
        "--variants",
        type=csv(str),
        help=f"policies besides the default: a speed model then any +option "
        f"({', '.join(OPTIONS)}), e.g. usl+closed-loop (default: usl, the paper's rule)",
    )
    m.add_argument("--seeds", type=int, help="traces per load (default 3)")
    m.add_argument("--seed-base", type=int, help="trace seeds BASE..BASE+seeds-1 (default 11000)")
    m.add_argument("--requests", type=int, help="requests per run (default 100)")
    m.add_argument(
        "--mode",
        choices=get_args(Mode),
        help="realistic (default): clients send their task's cap as max_tokens; oracle: "
        "the true length, and the scheduler trusts it (what knowing every length is worth)",
    )
    m.add_argument(
        "--goodput",
        type=goodput_argument,
        metavar='"ttft:MS tpot:MS e2el:MS"',
        help="SLOs as vLLM's benchmark takes them, for every task in place of its own: "
        "milliseconds, or NAME:Nx, N times the 90th percentile of the engine's own time "
        "for that part (each request alone); a request is good when it meets every part",
    )
    m.add_argument("--jobs", type=int, help="worker processes (default: CPU count)")
    m.add_argument(
        "--format",
        choices=("table", "markdown", "json"),
        default="table",
        help="stdout: table (the summary and the cells), markdown (results.md, with every "
        "load) or json (results.json)",
    )
    m.add_argument("--out", type=Path, help="folder for results.json, results.md and PNGs")
    m.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def _matrix_from(args: argparse.Namespace, extra: dict[str, EnginePreset]) -> Matrix:
    matrix = Matrix.quick() if args.quick else Matrix()
    if extra and not args.presets:
        matrix = dataclasses.replace(matrix, presets=(*matrix.presets, *extra))
    overrides = {
        "presets": args.presets,
        "workloads": args.workloads,
        "grids": args.grids,
        "sla_scales": args.sla_scales,
        "rps": args.rps,
        "multiples": args.multiples,
        "batch_sizes": args.batch_sizes,
        "variants": args.variants,
        "seeds": args.seeds,
        "seed_base": args.seed_base,
        "requests": args.requests,
        "mode": args.mode,
        "goodput": args.goodput,
    }
    matrix = dataclasses.replace(matrix, **{k: v for k, v in overrides.items() if v is not None})
    problems = []
    unknown = [p for p in matrix.presets if p not in PRESETS and p not in extra]
    if unknown:
        problems.append(f"unknown preset(s) {', '.join(unknown)}; known: {', '.join(PRESETS)}")
    if set(matrix.grids) - set(GRIDS):
        problems.append(f"unknown load grid(s); known: {', '.join(GRIDS)}")
    for name in ("sla_scales", "rps", "multiples", "batch_sizes"):
        values = getattr(matrix, name)
        if not values or min(values) <= 0:
            problems.append(f"--{name.replace('_', '-')} must be positive numbers")
    if matrix.seeds < 1 or matrix.requests < 1:
        problems.append("--seeds and --requests must be >= 1")
    if problems:
        raise SystemExit("saber-bench: " + "; ".join(problems))
    check_variants(matrix.variants)
    return matrix


def cmd_matrix(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        extra = load_engines(args.engines_file) if args.engines_file else {}
    except ConfigError as exc:
        raise SystemExit(f"saber-bench: {exc}") from None
    matrix = _matrix_from(args, extra)
    tasks = shipped_tasks()
    workloads = load_workloads(tasks=tasks)
    missing = set(matrix.workloads) - set(workloads)
    if missing:
        raise SystemExit(f"saber-bench: unknown workload(s): {', '.join(sorted(missing))}")
    started = time.perf_counter()
    presets = {p: extra[p] if p in extra else PRESETS[p] for p in matrix.presets}
    run = run_matrix(
        matrix, presets, tasks, workloads, jobs=args.jobs, progress=not args.no_progress
    )
    for name, fit in run.fits.items():
        caps = ", ".join(f"{w} {c:.3g}" for w, c in fit.capacity.items())
        err.print(f"{name}: vLLM alone saturates at {caps} requests/s")
    cells = summarize_matrix(run)
    if args.format == "json" or args.out:
        data = to_json(run, cells)
    if args.format == "table":
        print(summary_markdown(matrix, cells) + "\n" + cells_markdown(matrix, cells))
    else:
        print(data if args.format == "json" else markdown(matrix, cells))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(data)
        (args.out / "results.md").write_text(markdown(matrix, cells))
        for path in write_heatmaps(matrix, cells, args.out):
            err.print(f"wrote {path}")
    runs = len(matrix.batch_sizes) + 1 + len(matrix.sla_scales) * len(matrix.policies)
    err.print(
        f"{len(run.results)} traces, {len(run.results) * runs} runs of {matrix.requests} "
        f"requests in {time.perf_counter() - started:.1f} s"
    )
    return 0
