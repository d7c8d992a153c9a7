"""saber-profile: measure a live backend's speed at many loads and write the gateway's profile.

    saber-profile --base-url http://127.0.0.1:8000 --model qwen-coder [--quick] \\
        [--workload W3 | --dataset FILE.jsonl] [--levels 1,2,4,8,16,32,64] \\
        [--requests-per-level N] [--out profiles/NAME.json] [--plot FILE.png] [--resume]

A full run is about 1,250 requests (12 minutes on saber-sim's paper preset at time
scale 1); ``--quick`` holds each level for a set time instead, 8 s at load 1 to 32 s
at load 64: 2 min 30 s on any engine.

Exit codes: 0 the profile was written; 2 an error, printed as one line (the
backend is unreachable, the model is not served, bad options, too few points to
fit); 130 interrupted (Ctrl-C): the points so far are kept in the points file,
and a profile is still written from them when they span enough levels to fit.
See docs/profile.md.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from saber.config import (
    ConfigError,
    TaskType,
    Workload,
    add_config_file,
    load_tasks,
    load_workloads,
)
from saber.profile.errors import ProfileInterrupted, ProfileRunError
from saber.profile.feasibility import feasibility
from saber.profile.points import Point, points_path, read_points
from saber.profile.report import print_summary
from saber.profile.run import (
    DEFAULT_LEVELS,
    DEFAULT_POINTS,
    DEFAULT_ROUNDS,
    QUICK_LEVEL_S,
    profile_backend,
)
from saber.profile.slos import MARGIN, SHARE, basis, met_shares, slos_yaml, suggest_slos
from saber.profile.slos.view import latency_view, met_levels, share_text, suggestions_view
from saber.speed import LatencyTable, Profile

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
FULL_REQUESTS = DEFAULT_POINTS + DEFAULT_ROUNDS * sum(DEFAULT_LEVELS)  # warm-up: L at load L
QUICK_MINUTES = "2 min 30 s"


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not levels or levels[0] < 1:
        raise argparse.ArgumentTypeError("levels must be integers >= 1, e.g. 1,2,4,8")
    return levels


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="saber-profile",
        description="Drive a vLLM, llama.cpp or saber-sim backend at several load levels "
        "(closed loop), fit the speed models and write the profile saber-gateway loads. "
        f"A full run sends about {FULL_REQUESTS:,} requests: about 12 minutes on saber-sim's "
        "paper preset at time scale 1, and on a GPU as long as that many answers take at "
        f"those loads. --quick takes {QUICK_MINUTES} on any engine.",
        epilog="Exit codes: 0 done, 2 error, 130 interrupted (points kept; see --resume).",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"hold each level for a set time in one round ({QUICK_LEVEL_S:g} s at load 1, "
        "half as long again for each doubling of the load): a profile to start with in "
        f"{QUICK_MINUTES} (docs/profile.md says how close "
        "it comes to a full run)",
    )
    parser.add_argument(
        "--base-url", required=True, metavar="URL", help="backend URL, with or without /v1"
    )
    parser.add_argument(
        "--model", required=True, metavar="NAME", help="served model name to profile"
    )
    parser.add_argument(
        "--api-key", metavar="KEY", help="sent as a bearer token, if the backend needs one"
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--workload", metavar="NAME", help="task mix to draw requests from (default W3)"
    )
    source.add_argument(
        "--dataset",
        type=Path,
        metavar="FILE",
        help="JSONL of requests (prompt_tokens or prompt, output_tokens)",
    )
    parser.add_argument(
        "--levels",
        type=_levels,
        metavar="L,L,...",
        help="loads to hold, comma-separated (default 1,2,4,8,16,32,64)",
    )
    parser.add_argument(
        "--requests-per-level",
        type=_positive,
        metavar="N",
        help=f"counted requests per level (default ceil({DEFAULT_POINTS} / levels))",
    )
    parser.add_argument(
        "--rounds",
        type=_positive,
        metavar="N",
        help=f"visits per level, up the levels then down (default {DEFAULT_ROUNDS}); a level "
        "whose visits disagree is measured again",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        metavar="N",
        help="requests discarded at the start of each visit to a level (default: L at load L)",
    )
    parser.add_argument("--endpoint", choices=("completions", "chat"), help="default completions")
    parser.add_argument(
        "--seed", type=int, metavar="N", help="seed of the request draws (default 0)"
    )
    parser.add_argument(
        "--held-out-levels",
        type=_levels,
        metavar="L,L,...",
        help="levels left out of the fits together and scored "
        "(default: each interior level left out in turn)",
    )
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="profile to write (default profiles/NAME.json)"
    )
    parser.add_argument(
        "--plot", type=Path, metavar="FILE", help="PNG to write (default: --out with .png)"
    )
    parser.add_argument("--no-plot", action="store_true", help="write no PNG")
    parser.add_argument(
        "--suggest-slos",
        type=Path,
        metavar="FILE",
        help="also write the suggested SLOs (printed after the tables) to FILE, as YAML: "
        "tasks: {NAME: {ttft_s, tpot_s, e2e_s}}",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue the run kept in OUT.points.jsonl"
    )
    add_config_file(parser, "tasks", "task types judged in the feasibility report")
    add_config_file(parser, "workloads", "task mixes")
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds one request may take (default 600)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Off a terminal rich would wrap the tables at 80 columns.
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 120)
    try:
        return _main(args, out, err)
    except ProfileRunError as exc:
        err.print(f"saber-profile: error: {exc}", markup=False, soft_wrap=True)
        return EXIT_ERROR


def _main(args: argparse.Namespace, out: Console, err: Console) -> int:
    tasks = _tasks(args.tasks)
    profile_out = args.out or Path("profiles") / f"{_slug(args.model)}.json"
    started = time.monotonic()
    try:
        profile = profile_backend(
            args.base_url,
            args.model,
            profile_out,
            workload=args.workload,
            dataset=args.dataset,
            tasks=tasks,
            workloads=None if args.dataset else _workloads(args.workloads, tasks),
            levels=args.levels,
            requests_per_level=args.requests_per_level,
            rounds=args.rounds,
            warmup=args.warmup,
            endpoint=args.endpoint,
            seed=args.seed,
            held_out_levels=args.held_out_levels,
            api_key=args.api_key,
            timeout_s=args.timeout,
            resume=args.resume,
            quick=args.quick,
            console=err,
            progress=not args.no_progress,
        )
    except ProfileInterrupted as stop:
        err.print(
            f"interrupted: {stop.kept} points kept in {stop.points}; "
            "run again with --resume to continue",
            markup=False,
            soft_wrap=True,
        )
        if stop.profile is None:
            err.print(f"no profile written: {stop.reason}", markup=False, soft_wrap=True)
        else:
            _report(args, stop.profile, tasks, profile_out, out)
        return EXIT_INTERRUPTED
    _report(args, profile, tasks, profile_out, out)
    took = round(time.monotonic() - started)
    err.print(f"profiled in {took // 60} min {took % 60} s", markup=False, soft_wrap=True)
    return 0


def _report(
    args: argparse.Namespace,
    profile: Profile,
    tasks: dict[str, TaskType],
    profile_out: Path,
    out: Console,
) -> None:
    """The tables, the plot, and where the files went."""
    recorded = read_points(points_path(profile_out))
    points = recorded.fit_points()
    top = max(p.level for p in points)
    rows = feasibility(profile.speed_model(), tasks, profiled_max=top, ttft=profile.ttft_fit)
    print_summary(out, profile, recorded, rows)
    if profile.profiling is not None and profile.profiling.latencies is not None:
        _suggest(args.suggest_slos, profile, profile.profiling.latencies, points, out)
    out.print(
        f"wrote {profile_out}: {profile.kind} {_params(profile.params)}; {len(points)} points",
        markup=False,
        soft_wrap=True,
    )
    if not args.no_plot:
        from saber.profile.plot import write_plot  # matplotlib, only when a plot is asked for

        plot = args.plot or profile_out.with_suffix(".png")
        write_plot(plot, points, profile, title=f"{profile.model.name} ({profile.backend.kind})")
        out.print(f"wrote {plot}", markup=False, soft_wrap=True)


def _suggest(
    path: Path | None, profile: Profile, table: LatencyTable, points: list[Point], out: Console
) -> None:
    """The latency table, the SLOs suggested from it (a table, then YAML), and ``path``."""
    out.print(latency_view(table))
    slos = suggest_slos(table)
    row = basis(table)
    if row is None:
        out.print("no SLOs suggested: no request finished at 3/4 of capacity", markup=False)
        return
    levels = met_levels(table)
    out.print(suggestions_view(slos, met_shares(points, slos, list(levels)), levels))
    comments = [
        f"SLOs suggested by saber-profile for {profile.model.name} on {profile.backend.kind}: "
        f"each part {MARGIN:g} x its p90 at {share_text(SHARE)} of capacity (L={row.level}).",
        "Put each task's parts in its entry under tasks: in configs/gateway.yaml, in place of",
        "sla_s and sla_kind, and keep the parts its users feel: a chat panel ttft_s and tpot_s,",
        "an editor's completion ttft_s, a batch job e2e_s (docs/gateway.md, Choosing SLOs).",
    ]
    text = slos_yaml(slos, comments)
    out.print(text, markup=False, highlight=False, soft_wrap=True, end="")
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ProfileRunError(f"cannot write {path}: {exc}") from None
        out.print(f"wrote {path}", markup=False, soft_wrap=True)


def _tasks(path: Path) -> dict[str, TaskType]:
    try:
        return load_tasks(path)
    except ConfigError as exc:
        raise ProfileRunError(" ".join(str(exc).split())) from None


def _workloads(path: Path, tasks: dict[str, TaskType]) -> dict[str, Workload]:
    """The task mixes of ``path``."""
    try:
        return load_workloads(path, tasks=tasks)
    except ConfigError as exc:
        raise ProfileRunError(str(exc).replace("\n", " ")) from None


def _params(params: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4g}" for k, v in params.items())


def _slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_") or "profile"


if __name__ == "__main__":
    sys.exit(main())
