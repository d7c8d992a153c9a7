"""saber-profile: measure a live backend's speed at many loads and write the gateway's profile.

    saber-profile --base-url http://127.0.0.1:8000 --model qwen-coder \\
        [--workload W3 | --dataset FILE.jsonl] [--levels 1,2,4,8,16,32,64] \\
        [--requests-per-level N] [--out profiles/NAME.json] [--plot FILE.png] [--resume]

Exit codes: 0 the profile was written; 2 an error, printed as one line (the
backend is unreachable, the model is not served, bad options, too few points to
fit); 130 interrupted (Ctrl-C): the points so far are kept in the points file,
and a profile is still written from them when they span enough levels to fit.
See docs/profile.md.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from saber.config import DEFAULT_CONFIG_DIR, ConfigError, TaskType, load_tasks, load_workloads
from saber.profile.errors import ProfileRunError
from saber.profile.feasibility import feasibility
from saber.profile.fit import fit_speed, fit_ttft
from saber.profile.plot import write_plot
from saber.profile.points import PointsFile, Recorded, points_path, read_points
from saber.profile.report import print_summary
from saber.profile.requests import Supply, WorkloadSupply, read_dataset
from saber.profile.session import RunSettings, Session, SessionResult, run_session
from saber.speed import (
    FitError,
    FitScore,
    Profile,
    ProfiledBackend,
    ProfileError,
    ProfilingInfo,
    build_profile,
    load_profile,
    save_profile,
)

DEFAULT_LEVELS = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_POINTS = 1000
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


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
        "(closed loop), fit the speed models and write the profile saber-gateway loads.",
        epilog="Exit codes: 0 done, 2 error, 130 interrupted (points kept; see --resume).",
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
        "--warmup",
        type=int,
        metavar="N",
        help="requests discarded at the start of each level (default: L at load L)",
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
        "--resume", action="store_true", help="continue the run kept in OUT.points.jsonl"
    )
    parser.add_argument(
        "--tasks",
        type=Path,
        default=DEFAULT_CONFIG_DIR / "tasks.yaml",
        metavar="FILE",
        help="task types judged in the feasibility report (default configs/tasks.yaml)",
    )
    parser.add_argument(
        "--workloads",
        type=Path,
        default=DEFAULT_CONFIG_DIR / "workloads.yaml",
        metavar="FILE",
        help="task mixes (default configs/workloads.yaml)",
    )
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
    store = points_path(profile_out)
    settings, supply = _settings(args, tasks, store)
    if args.resume:
        file = PointsFile.resume(store)
        err.print(
            f"resuming {store}: {len(file.recorded.points)} points so far",
            markup=False,
            soft_wrap=True,
        )
    else:
        file = PointsFile.create(store, settings.to_json())
    session = Session(
        settings,
        supply,
        file,
        api_key=args.api_key,
        timeout_s=args.timeout,
        console=err,
        progress=not args.no_progress,
    )
    interrupted = False
    try:
        run_session(session)
    except KeyboardInterrupt:
        interrupted = True
        err.print(
            f"interrupted: {len(file.recorded.fit_points())} points kept in {store}; "
            "run again with --resume to continue",
            markup=False,
            soft_wrap=True,
        )
    except ProfileRunError:
        if file.recorded.points:
            err.print(f"points so far are kept in {store}", markup=False, soft_wrap=True)
        raise
    try:
        _finish(args, settings, session.result, file.recorded, tasks, profile_out, out)
    except ProfileRunError as exc:
        if not interrupted:
            err.print(f"points so far are kept in {store}", markup=False, soft_wrap=True)
            raise
        err.print(f"no profile written: {exc}", markup=False, soft_wrap=True)
    return EXIT_INTERRUPTED if interrupted else 0


def _finish(
    args: argparse.Namespace,
    settings: RunSettings,
    result: SessionResult,
    recorded: Recorded,
    tasks: dict[str, TaskType],
    profile_out: Path,
    out: Console,
) -> None:
    """Fit, report, and write the profile and the plot; ProfileRunError if it cannot fit."""
    points = recorded.fit_points()
    levels = sorted({p.level for p in points})
    if len(levels) < 2:  # one level's loads vary a little, but say nothing about f(L)
        raise ProfileRunError(
            f"cannot fit {len(points)} points at {len(levels)} load level(s) "
            f"{levels or ''}: at least 2 are needed"
        )
    try:
        fits = fit_speed(points, held_out=args.held_out_levels)
    except FitError as exc:
        raise ProfileRunError(
            f"cannot fit {len(points)} points at levels {levels}: {exc}"
        ) from None
    ttft = fit_ttft(points)
    top = max(p.level for p in points)
    rows = feasibility(fits.best.model, tasks, profiled_max=top, ttft=ttft)
    print_summary(out, recorded, fits, ttft, rows)
    saturated = recorded.saturated
    backend = result.backend
    info = ProfilingInfo(
        source=settings.source,
        endpoint=settings.endpoint,
        levels=sorted({p.level for p in points}),
        held_out_levels=fits.held_out,
        scoring=fits.scoring,
        requests_per_level=settings.requests_per_level,
        warmup="L requests at load L" if settings.warmup is None else f"{settings.warmup}",
        lengths="forced" if result.lengths_forced else "observed",
        saturated_at=None if saturated is None else saturated.level,
        max_running=max(
            (end.running for end in recorded.ended.values() if end.running is not None),
            default=None,
        ),
        fits=[
            FitScore(
                kind=r.kind,
                params=r.model.params,
                r2=r.r2,
                mape=r.mape,
                level_r2=fits.level_r2.get(r.kind),
                in_sample_r2=fits.in_sample_r2.get(r.kind),
            )
            for r in fits.reports
        ],
    )
    loads = [p.load for p in points]
    speeds = [p.speed for p in points]
    profile = build_profile(
        fits.best.model,
        loads,
        speeds,
        backend=ProfiledBackend(
            kind=str(backend.kind) if backend else "unknown",
            url=settings.base_url,
            version=backend.version if backend else None,
        ),
        model_name=settings.model,
        notes=_notes(settings, fits.best.kind, partial=len(points) < _expected(settings)),
    ).model_copy(update={"ttft_fit": ttft, "profiling": info})
    save_profile(Profile.model_validate(profile.model_dump()), profile_out)
    try:
        load_profile(profile_out)
    except ProfileError as exc:  # pragma: no cover - a bug in this tool, not the operator's
        raise ProfileRunError(f"wrote an invalid profile: {exc}") from None
    out.print(
        f"wrote {profile_out}: {fits.best.kind} {_params(fits.best.model.params)}; "
        f"{len(points)} points",
        markup=False,
        soft_wrap=True,
    )
    if not args.no_plot:
        plot = args.plot or profile_out.with_suffix(".png")
        write_plot(plot, points, fits, ttft, title=f"{settings.model} ({profile.backend.kind})")
        out.print(f"wrote {plot}", markup=False, soft_wrap=True)


def _settings(
    args: argparse.Namespace, tasks: dict[str, TaskType], store: Path
) -> tuple[RunSettings, Supply]:
    """Settings from the flags, or on --resume from the points file (flags must agree)."""
    given: dict[str, Any] = {
        "endpoint": args.endpoint,
        "levels": args.levels,
        "requests_per_level": args.requests_per_level,
        "warmup": args.warmup,
        "seed": args.seed,
    }
    source = None
    if args.dataset is not None:
        source = f"dataset {args.dataset}"
    elif args.workload is not None:
        source = f"workload {args.workload}"
    if args.resume:
        saved = read_points(store).settings
        for key, value in [*given.items(), ("source", source), ("model", args.model)]:
            old = saved.get(key)
            if value is not None and _norm(value) != _norm(old):
                raise ProfileRunError(
                    f"--resume: the run in {store} used {key} {_show(old)}, not {_show(value)}; "
                    "drop the option or start afresh without --resume"
                )
        given = {k: saved.get(k) for k in given}
        source = saved.get("source")
    levels = tuple(given["levels"] or DEFAULT_LEVELS)
    per_level = given["requests_per_level"] or math.ceil(DEFAULT_POINTS / len(levels))
    if given["warmup"] is not None and given["warmup"] < 0:
        raise ProfileRunError("--warmup must be >= 0")
    seed = given["seed"] or 0
    supply = _supply(source or "workload W3", args, tasks, seed)
    settings = RunSettings(
        base_url=args.base_url,
        model=args.model,
        endpoint=given["endpoint"] or "completions",
        source=supply.description,
        levels=levels,
        requests_per_level=per_level,
        warmup=given["warmup"],
        seed=seed,
    )
    return settings, supply


def _supply(source: str, args: argparse.Namespace, tasks: dict[str, TaskType], seed: int) -> Supply:
    kind, _, name = source.partition(" ")
    if kind == "dataset":
        return read_dataset(Path(name))
    try:
        workloads = load_workloads(args.workloads, tasks=tasks)
    except ConfigError as exc:
        raise ProfileRunError(str(exc).replace("\n", " ")) from None
    if name not in workloads:
        raise ProfileRunError(f"unknown workload {name!r}; known: {', '.join(sorted(workloads))}")
    return WorkloadSupply(workloads[name], tasks, seed=seed)


def _tasks(path: Path) -> dict[str, TaskType]:
    try:
        return load_tasks(path)
    except ConfigError as exc:
        raise ProfileRunError(" ".join(str(exc).split())) from None


def _show(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple | list) else str(value)


def _norm(value: Any) -> Any:
    return list(value) if isinstance(value, tuple | list) else value


def _expected(settings: RunSettings) -> int:
    return settings.requests_per_level * len(settings.levels)


def _notes(settings: RunSettings, kind: str, *, partial: bool) -> str:
    note = (
        f"saber-profile: closed loop over HTTP ({settings.endpoint}), {settings.source}, "
        f"levels {list(settings.levels)}; speed = output tokens / (request sent -> end of "
        f"stream), TTFT included; load = time-averaged requests in flight; kept {kind}"
    )
    return note + ("; partial run" if partial else "")


def _params(params: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4g}" for k, v in params.items())


def _slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_") or "profile"


if __name__ == "__main__":
    sys.exit(main())
