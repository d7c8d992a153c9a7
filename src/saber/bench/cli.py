"""saber-bench: the paper's experiment, in virtual time on the engine model.

saber-bench sim [--quick] [--format table|markdown|json] [--out DIR]
saber-bench scenarios [--scenarios step-W3,...] [--seeds 3] [--format json]
saber-bench matrix [--quick] [--presets paper,...] [--engines-file F] [--out DIR]
saber-bench cluster [--pool 2xa10-qwen2.5-coder-3b,1xa100-40gb-qwen2.5-coder-3b] [--out DIR]
saber-bench replay TRACE [--quick] [--presets paper,...] [--rates 0.5,1,2] [--out DIR]
saber-bench profile --preset paper --out profiles/saber-sim-paper.json
saber-bench real --engine URL --gateway URL --model NAME [--rps R] [--requests N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from rich.console import Console

from saber.bench._args import check_variants, csv
from saber.bench._goodput import goodput_argument, goodput_tasks
from saber.bench._grid import (
    OPTIONS,
    PAPER_BATCH_SIZES,
    VARIANTS,
    Sweep,
    benchmark_tasks,
    variant_kind,
    with_default,
)
from saber.bench._offline import DEFAULT_LEVELS, engine_profile, fit_variants, profile_engine
from saber.bench._plots import write_all
from saber.bench._progress import progress_bar
from saber.bench._report import markdown, to_json
from saber.bench._runner import run_sweep
from saber.bench._scenarios import SCENARIOS, run_scenario, runs_per_scenario
from saber.bench._scenarios import markdown as scenario_markdown
from saber.bench._scenarios import summary as scenario_summary
from saber.bench._summary import summarize_cells, summarize_workloads
from saber.bench.cluster.cmd import add_parser as add_cluster_parser
from saber.bench.cluster.cmd import cmd_cluster
from saber.bench.matrix.cmd import add_parser as add_matrix_parser
from saber.bench.matrix.cmd import cmd_matrix
from saber.bench.real.cmd import add_parser as add_real_parser
from saber.bench.real.cmd import cmd_real
from saber.bench.replay.cmd import add_parser as add_replay_parser
from saber.bench.replay.cmd import cmd_replay
from saber.config import load_tasks, load_workloads
from saber.engine import PRESETS, get_preset
from saber.scheduler import TTFTFn
from saber.speed import MODELS, SpeedModel, build_profile, save_profile, select_model


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="saber-bench", description="Reproduce the SABER paper's experiment."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser(
        "sim",
        help="static max_num_seqs vs SABER, in virtual time",
        description="Sweep workloads x RPS x static B, and SABER with each speed model, "
        "on the engine model in virtual time. Prints a table; writes JSON, markdown and "
        "PNG figures with --out.",
    )
    sim.add_argument("--quick", action="store_true", help="the CI-sized sweep")
    sim.add_argument("--workloads", type=csv(str), help="e.g. W1,W3 (default: all)")
    sim.add_argument("--rps", type=csv(float), help="e.g. 1,5,10,20 (default: the paper's)")
    sim.add_argument("--batch-sizes", type=csv(int), help="static B values (default 10..100)")
    sim.add_argument("--modes", type=csv(str), help="oracle,realistic (default: both)")
    sim.add_argument(
        "--variants",
        type=csv(str),
        help=f"SABER variants, a speed model then any +option ({', '.join(OPTIONS)}), "
        f"e.g. usl+closed-loop+no_future (default: {','.join(VARIANTS)}); the policy "
        "configs/gateway.yaml ships (default) always runs too",
    )
    sim.add_argument("--seeds", type=int, help="seeds per point (default 10)")
    sim.add_argument(
        "--seed-base",
        type=int,
        help="trace seeds are BASE..BASE+seeds-1 (default 1000); another base: held-out traces",
    )
    sim.add_argument("--requests", type=int, help="requests per run (default 100, as the paper)")
    sim.add_argument("--window-size", type=int, help="SABER's window (default 8)")
    sim.add_argument("--preset", choices=sorted(PRESETS), help="engine preset (default paper)")
    sim.add_argument(
        "--goodput",
        type=goodput_argument,
        metavar='"ttft:MS tpot:MS e2el:MS"',
        help="SLOs as vLLM's benchmark takes them, for every task in place of its own "
        "(milliseconds, or NAME:Nx of the engine's own time; saber-bench matrix --help)",
    )
    sim.add_argument("--jobs", type=int, help="worker processes (default: CPU count)")
    sim.add_argument(
        "--format",
        choices=("table", "markdown", "json"),
        default="table",
        help="stdout format; json is a list of rows (default table)",
    )
    sim.add_argument("--out", type=Path, help="folder for results.json, results.md and PNGs")
    sim.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    prof = sub.add_parser(
        "profile",
        help="fit a speed profile of an engine preset (the offline phase, virtual time)",
    )
    prof.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    prof.add_argument("--workload", default="W3", help="task mix to profile with (default W3)")
    prof.add_argument("--points", type=int, default=1000, help="about this many points")
    prof.add_argument(
        "--kind",
        choices=sorted(MODELS),
        help="force a model (default: the one select_model keeps, as saber-profile)",
    )
    prof.add_argument("--out", type=Path, required=True, help="profile JSON to write")
    scen = sub.add_parser(
        "scenarios",
        help="long runs: bursty arrivals, a load step, drift of the engine",
        description="Beyond the paper's 100-request bursts, realistic mode, virtual time: "
        "each scenario's trace served by every static B, vLLM's default 256, the paper's "
        "rule and the shipped default (and, under drift, the default without refit, "
        "without learning, and with the true profile).",
    )
    scen.add_argument(
        "--scenarios",
        type=csv(str),
        help=f"which (default all: {', '.join(SCENARIOS)})",
    )
    scen.add_argument("--seeds", type=int, default=3, help="traces per scenario (default 3)")
    scen.add_argument("--seed-base", type=int, default=7000, help="trace seeds (default 7000)")
    scen.add_argument("--batch-sizes", type=csv(int), help="static B values (default 10..100)")
    scen.add_argument(
        "--format", choices=("markdown", "json"), default="markdown", help="stdout format"
    )
    scen.add_argument("--out", type=Path, help="write scenarios.md and scenarios.json here")
    scen.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_matrix_parser(sub)
    add_cluster_parser(sub)
    add_replay_parser(sub)
    add_real_parser(sub)
    return parser


def _sweep_from(args: argparse.Namespace) -> Sweep:
    sweep = Sweep.quick() if args.quick else Sweep()
    overrides = {
        "workloads": args.workloads,
        "rps": args.rps,
        "batch_sizes": args.batch_sizes,
        "modes": args.modes,
        "variants": args.variants,
        "seeds": args.seeds,
        "seed_base": args.seed_base,
        "requests": args.requests,
        "window_size": args.window_size,
        "preset": args.preset,
    }
    sweep = dataclasses.replace(sweep, **{k: v for k, v in overrides.items() if v is not None})
    if "usl" not in sweep.variants:
        raise SystemExit("saber-bench: --variants must include usl (SABER's default model)")
    check_variants(sweep.variants)
    return sweep


def cmd_sim(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    sweep = _sweep_from(args)
    tasks = load_tasks()
    workloads = load_workloads(tasks=tasks)
    tasks = goodput_tasks(tasks, args.goodput, get_preset(sweep.preset), workloads["W3"])
    missing = set(sweep.workloads) - set(workloads)
    if missing:
        raise SystemExit(f"saber-bench: unknown workload(s): {', '.join(sorted(missing))}")
    started = time.perf_counter()
    loads, speeds = profile_engine(
        get_preset(sweep.preset), workloads["W3"], tasks, points=sweep.profile_points
    )
    variants = with_default(sweep.variants)
    models = fit_variants(loads, speeds, sorted({variant_kind(v) for v in variants}))
    for kind, model in models.items():
        params = ", ".join(f"{k}={v:.4g}" for k, v in model.params.items())
        err.print(f"offline phase: {kind:9s} f(1)={model(1):.1f} tok/s  {params}")
    results = run_sweep(
        sweep, tasks, workloads, models, jobs=args.jobs, progress=not args.no_progress
    )
    rows = summarize_cells(results)
    summaries = [s for v in variants for s in summarize_workloads(rows, v)]
    text = markdown(rows, summaries)
    if args.format == "json":
        print(to_json(rows))
    else:
        print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(to_json(rows))
        (args.out / "results.md").write_text(text)
        for path in write_all(rows, args.out):
            err.print(f"wrote {path}")
    err.print(
        f"{len(results)} traces, {len(results) * (len(sweep.batch_sizes) + len(variants))} "
        f"runs of {sweep.requests} requests in {time.perf_counter() - started:.1f} s"
    )
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    names = args.scenarios or tuple(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(
            f"saber-bench: unknown scenario(s): {', '.join(unknown)}; known: {', '.join(SCENARIOS)}"
        )
    batch_sizes = args.batch_sizes or PAPER_BATCH_SIZES
    # The task types the gateway ships, with their useful_s: what a deployment serves.
    tasks = benchmark_tasks()
    workloads = load_workloads(tasks=tasks)
    fitted: dict[str, tuple[SpeedModel, TTFTFn | None]] = {}

    def model(preset: str) -> tuple[SpeedModel, TTFTFn | None]:
        if preset not in fitted:
            speed, ttft = engine_profile(get_preset(preset), workloads["W3"], tasks)
            fitted[preset] = (speed, None if ttft is None else ttft.predict)
        return fitted[preset]

    seeds = range(args.seed_base, args.seed_base + args.seeds)
    total = sum(runs_per_scenario(SCENARIOS[n], batch_sizes) for n in names) * args.seeds
    started = time.perf_counter()
    results = {}
    with progress_bar(total, "scenarios", enabled=not args.no_progress) as advance:
        for name in names:
            results[name] = run_scenario(
                SCENARIOS[name], tasks, workloads, model, seeds=seeds,
                batch_sizes=batch_sizes, advance=advance,
            )  # fmt: skip
    text = "\n".join(scenario_markdown(SCENARIOS[n], results[n]) for n in names)
    data = json.dumps(
        {
            n: {
                "description": SCENARIOS[n].description,
                "phases": list(SCENARIOS[n].phase_names),
                "runs": [dataclasses.asdict(o) for o in results[n]],
                "summary": scenario_summary(SCENARIOS[n], results[n]),
            }
            for n in names
        },
        indent=2,
    )
    print(data if args.format == "json" else text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scenarios.md").write_text(text)
        (args.out / "scenarios.json").write_text(data)
    Console(stderr=True).print(
        f"{len(names)} scenarios x {args.seeds} seeds in {time.perf_counter() - started:.1f} s"
    )
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    tasks = load_tasks()
    workloads = load_workloads(tasks=tasks)
    preset = get_preset(args.preset)
    loads, speeds = profile_engine(preset, workloads[args.workload], tasks, points=args.points)
    fits = select_model(loads, speeds)  # the procedure saber-profile uses
    print(f"scored {fits.scoring}")
    for rep in fits.reports:
        print(
            f"{rep.kind:9s} level error={100 * rep.level_error:.2f}%  held-out "
            f"R^2={rep.r2:.4f}  MAPE={100 * rep.mape:.2f}%  in-sample R^2={rep.in_sample_r2:.4f}"
        )
    model = next((r.model for r in fits.reports if r.kind == args.kind), fits.best.model)
    profile = build_profile(
        model,
        loads,
        speeds,
        backend={"kind": "sim", "url": None, "version": f"saber-sim preset {args.preset}"},
        model_name=f"{preset.model.name} on {preset.hardware.name} (engine model)",
        notes=f"virtual-time closed loop, {args.workload} mix, levels {list(DEFAULT_LEVELS)}",
    )
    # The TTFT fit of the same closed loops, as saber-profile writes one (TTFT-kind SLAs).
    _, ttft = engine_profile(preset, workloads[args.workload], tasks, points=args.points)
    profile = profile.model_copy(update={"ttft_fit": ttft})
    save_profile(profile, args.out)
    print(f"wrote {args.out}: {profile.kind} r2={profile.r2:.4f} params={profile.params}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {
        "sim": cmd_sim,
        "scenarios": cmd_scenarios,
        "profile": cmd_profile,
        "matrix": cmd_matrix,
        "cluster": cmd_cluster,
        "replay": cmd_replay,
        "real": cmd_real,
    }[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
