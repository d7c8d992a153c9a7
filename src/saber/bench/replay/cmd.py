"""``saber-bench replay TRACE``: a recorded trace replayed on the engine model."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import get_args

from rich.console import Console

from saber.bench._args import csv
from saber.bench._engines_file import load_engines
from saber.bench._goodput import goodput_argument
from saber.bench._grid import OPTIONS
from saber.bench.replay.cases import CASES
from saber.bench.replay.plots import goodput_vs_load
from saber.bench.replay.report import markdown, static_markdown, summarize, to_json
from saber.bench.replay.run import (
    PRESETS,
    RATES,
    VARIANTS,
    RateOf,
    Replay,
    kind_of,
    policy_of,
    prepare,
    run_replay,
)
from saber.config import ConfigError
from saber.engine import PRESETS as ENGINE_PRESETS
from saber.speed import MODELS
from saber.workload import UNNAMED_TASK, TraceFormatError

# Wall time on the project's 2-core machine, shared with other work (docs/bench.md).
QUICK_TIME = "10 to 40 seconds"
FULL_TIME = "12 minutes on azure-code and 64 on joint-W1 (345 and 2,241 s of CPU)"


def add_parser(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser(
        "replay",
        help="a recorded trace, in windows, against static B and vLLM alone",
        description="Cut TRACE into windows of consecutive requests, keep each window's "
        "arrival order and spacing and scale it to each load, and serve it in virtual "
        "time by vLLM alone, every static max_num_seqs, the shipped default, the default "
        "told the answers' lengths (all, or one task type's), --variants, and each "
        "request alone. Each scheduler starts from what it learned on the window before "
        "(the first window only warms up). TRACE is a JSONL trace, an Azure LLM "
        f"inference CSV, or a case: {', '.join(CASES)}. On 2 shared cores --quick takes "
        f'{QUICK_TIME}, the default {FULL_TIME}; see docs/bench.md, "Replay".',
    )
    r.add_argument("trace", metavar="TRACE", help=f"a trace file or one of {', '.join(CASES)}")
    r.add_argument(
        "--quick",
        action="store_true",
        help="CI-sized: the paper's engine, 2 windows of 100, loads 0.5x and 1.5x, B "
        f"10,30,60,100 ({QUICK_TIME})",
    )
    r.add_argument("--presets", type=csv(str), help=f"engines (default {','.join(PRESETS)})")
    r.add_argument(
        "--engines-file",
        type=Path,
        metavar="F",
        help="YAML list of more engines, as the matrix takes it (docs/bench.md); run as "
        "well as --presets' unless --presets names them",
    )
    r.add_argument("--windows", type=int, help="windows measured (default 8; one more warms up)")
    r.add_argument("--window-size", type=int, help="requests per window (default 300)")
    r.add_argument(
        "--start",
        type=int,
        help="consecutive windows from this request (default: spread over the trace)",
    )
    r.add_argument(
        "--rates",
        type=csv(float),
        help=f"loads, multiples of --rate-of (default {','.join(f'{x:g}' for x in RATES)})",
    )
    r.add_argument(
        "--rate-of",
        choices=get_args(RateOf),
        help="capacity (default): the rate at which vLLM alone saturates on a burst of "
        "the trace's requests, per engine; trace: the trace's own mean rate",
    )
    r.add_argument("--batch-sizes", type=csv(int), help="static B values (default 10..100)")
    r.add_argument(
        "--variants",
        type=csv(str),
        help=f"policies besides default and told: default+<option>... (the shipped policy "
        f"with options), or a speed model then any +option ({', '.join(OPTIONS)}) "
        f"(default {','.join(VARIANTS)}; '' for none)",
    )
    r.add_argument(
        "--sla-scale",
        type=float,
        help=f"the e2e SLA of a trace without task types ({UNNAMED_TASK}): this times the "
        "90th percentile of each request's time alone on the engine (default 1.5)",
    )
    r.add_argument(
        "--max-tokens",
        type=int,
        help="the cap clients send for a trace without task types (default: the smallest "
        "power of two at least the trace's longest answer)",
    )
    r.add_argument(
        "--goodput",
        type=goodput_argument,
        metavar='"ttft:MS tpot:MS e2el:MS"',
        help="SLOs as vLLM's benchmark takes them, for every task in place of its own "
        "(milliseconds, or NAME:Nx: N times the 90th percentile of that part over the "
        "measured requests each alone on the engine)",
    )
    r.add_argument("--jobs", type=int, help="worker processes (default: CPU count)")
    r.add_argument(
        "--format",
        choices=("table", "markdown", "json"),
        default="table",
        help="stdout: table (a table per engine), markdown (results.md: also every static "
        "B) or json (results.json)",
    )
    r.add_argument("--out", type=Path, help="folder for results.json, results.md, replay.png")
    r.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def _replay_from(args: argparse.Namespace, extra: dict) -> Replay:
    replay = Replay.quick(args.trace) if args.quick else Replay(args.trace)
    if extra and not args.presets:
        replay = dataclasses.replace(replay, presets=(*replay.presets, *extra))
    overrides = {
        "presets": args.presets,
        "windows": args.windows,
        "window_size": args.window_size,
        "start": args.start,
        "rates": args.rates,
        "rate_of": args.rate_of,
        "batch_sizes": args.batch_sizes,
        "variants": args.variants,
        "sla_scale": args.sla_scale,
        "max_tokens": args.max_tokens,
        "goodput": args.goodput,
    }
    replay = dataclasses.replace(replay, **{k: v for k, v in overrides.items() if v is not None})
    problems = []
    unknown = [p for p in replay.presets if p not in ENGINE_PRESETS and p not in extra]
    if unknown:
        problems.append(
            f"unknown preset(s) {', '.join(unknown)}; known: {', '.join(ENGINE_PRESETS)}"
        )
    for name in ("rates", "batch_sizes"):
        values = getattr(replay, name)
        if not values or min(values) <= 0:
            problems.append(f"--{name.replace('_', '-')} must be positive numbers")
    if not replay.sla_scale > 0 or (replay.max_tokens is not None and replay.max_tokens < 1):
        problems.append("--sla-scale and --max-tokens must be positive")
    if problems:
        raise ValueError("; ".join(problems))
    bad = []
    for variant in replay.variants:
        try:
            policy_of(variant)
            known = kind_of(variant) in MODELS
        except (ValueError, TypeError):
            known = False
        if not known:
            bad.append(variant)
    if bad:
        raise ValueError(
            f"unknown variant(s) {', '.join(bad)}: default+<option>... or a speed model "
            f"({', '.join(MODELS)}) then any +<option>; options: {', '.join(OPTIONS)}"
        )
    return replay


def cmd_replay(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    started = time.perf_counter()
    try:
        extra = load_engines(args.engines_file) if args.engines_file else {}
        replay = _replay_from(args, extra)
        trace = prepare(replay)
    except (ConfigError, TraceFormatError, ValueError) as exc:
        print(f"saber-bench replay: {exc}", file=sys.stderr)
        return 2
    presets = {p: extra[p] if p in extra else ENGINE_PRESETS[p] for p in replay.presets}
    run = run_replay(replay, trace, presets, jobs=args.jobs, progress=not args.no_progress)
    loads = summarize(run)
    text = markdown(run, loads)
    if args.format == "json" or args.out:
        data = to_json(run, loads)
    if args.format == "json":
        print(data)
    else:
        print(text if args.format == "table" else text + "\n" + static_markdown(run, loads))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(data)
        (args.out / "results.md").write_text(text + "\n" + static_markdown(run, loads))
        err.print(f"wrote {goodput_vs_load(run, loads, args.out / 'replay.png')}")
    # Per engine and load: each policy serves every window (the warm-up too); every
    # static B, vLLM alone and the ceiling serve the measured ones.
    runs = len(trace.starts) * len(run.policies) + replay.windows * (len(replay.batch_sizes) + 2)
    err.print(
        f"{len(replay.presets)} engines x {len(replay.rates)} loads x {runs} runs of "
        f"{trace.size} requests in {time.perf_counter() - started:.1f} s"
    )
    return 0
