"""saber-bench: the paper's experiment, in virtual time on the engine model.

saber-bench sim [--quick] [--format table|markdown|json] [--out DIR]
saber-bench profile --preset paper --out profiles/saber-sim-paper.json
saber-bench real --engine URL --gateway URL --model NAME [--rps R] [--requests N]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from rich.console import Console

from saber.bench._grid import OPTIONS, VARIANTS, Sweep, parse_variant
from saber.bench._offline import DEFAULT_LEVELS, fit_variants, profile_engine
from saber.bench._plots import write_all
from saber.bench._real_cmd import add_parser as add_real_parser
from saber.bench._real_cmd import cmd_real
from saber.bench._report import markdown, to_json
from saber.bench._runner import run_sweep
from saber.bench._summary import summarize_cells, summarize_workloads
from saber.config import load_tasks, load_workloads
from saber.engine import PRESETS, get_preset
from saber.speed import MODELS, build_profile, save_profile, select_model


def _csv(kind):
    def parse(text: str):
        return tuple(kind(x) for x in text.split(",") if x.strip())

    return parse


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
    sim.add_argument("--workloads", type=_csv(str), help="e.g. W1,W3 (default: all)")
    sim.add_argument("--rps", type=_csv(float), help="e.g. 1,5,10,20 (default: the paper's)")
    sim.add_argument("--batch-sizes", type=_csv(int), help="static B values (default 10..100)")
    sim.add_argument("--modes", type=_csv(str), help="oracle,realistic (default: both)")
    sim.add_argument(
        "--variants",
        type=_csv(str),
        help=f"SABER variants, a speed model then any +option ({', '.join(OPTIONS)}), "
        f"e.g. usl+value+lpq_guard (default: {','.join(VARIANTS)})",
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
    unknown = set()
    for variant in sweep.variants:
        try:
            kind, _ = parse_variant(variant)
        except ValueError:
            kind = ""
        if kind not in MODELS:
            unknown.add(variant)
    if unknown:
        raise SystemExit(f"saber-bench: unknown variant(s): {', '.join(sorted(unknown))}")
    return sweep


def cmd_sim(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    sweep = _sweep_from(args)
    tasks = load_tasks()
    workloads = load_workloads(tasks=tasks)
    missing = set(sweep.workloads) - set(workloads)
    if missing:
        raise SystemExit(f"saber-bench: unknown workload(s): {', '.join(sorted(missing))}")
    started = time.perf_counter()
    loads, speeds = profile_engine(
        get_preset(sweep.preset), workloads["W3"], tasks, points=sweep.profile_points
    )
    models = fit_variants(loads, speeds, sorted({v.partition("+")[0] for v in sweep.variants}))
    for kind, model in models.items():
        params = ", ".join(f"{k}={v:.4g}" for k, v in model.params.items())
        err.print(f"offline phase: {kind:9s} f(1)={model(1):.1f} tok/s  {params}")
    results = run_sweep(
        sweep, tasks, workloads, models, jobs=args.jobs, progress=not args.no_progress
    )
    rows = summarize_cells(results)
    summaries = [s for v in sweep.variants for s in summarize_workloads(rows, v)]
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
        f"{len(results)} traces, {len(results) * (len(sweep.batch_sizes) + len(sweep.variants))} "
        f"runs of {sweep.requests} requests in {time.perf_counter() - started:.1f} s"
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
    save_profile(profile, args.out)
    print(f"wrote {args.out}: {profile.kind} r2={profile.r2:.4f} params={profile.params}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {"sim": cmd_sim, "profile": cmd_profile, "real": cmd_real}[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
