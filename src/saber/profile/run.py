"""``profile_backend``: one profiling run against a live backend, as a library call.

saber-profile is this function with argument parsing around it and the report
printed after it. The run writes its points to ``points_path(out)`` as they come,
fits them, and writes and returns the profile; the report (``saber.profile.report``)
and the plot are views of that profile and its points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from saber.config import ConfigError, TaskType, Workload, load_tasks, load_workloads
from saber.profile.errors import ProfileInterrupted, ProfileRunError
from saber.profile.fit import fit_speed, fit_ttft
from saber.profile.points import PointsFile, Recorded, points_path
from saber.profile.requests import Supply, WorkloadSupply, read_dataset
from saber.profile.session import RunSettings, Session, SessionResult, run_session
from saber.profile.slos import latency_table
from saber.profile.stream import Endpoint
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
"""Counted requests in all, spread over the levels, unless requests_per_level is given."""
DEFAULT_WORKLOAD = "W3"
DEFAULT_ROUNDS = 2
"""Visits per level: up the levels, then down (see ``saber.profile.session``)."""
QUICK_LEVEL_S = 8.0
"""``quick``: load 1 is held this long, warm-up included, in one round, and each doubling
of the load half as long again (``RunSettings.seconds_for``): the seven default levels
take 140 s, on any engine."""
QUICK_MAX_POINTS = 10_000
"""``quick``: counted points a level may have; its time ends it first."""
"""``quick``: counted points per level at most; the level's time ends it first."""


def profile_backend(
    base_url: str,
    model: str,
    out: Path,
    *,
    workload: str | None = None,
    dataset: Path | None = None,
    tasks: Mapping[str, TaskType] | None = None,
    workloads: Mapping[str, Workload] | None = None,
    levels: Sequence[int] | None = None,
    requests_per_level: int | None = None,
    rounds: int | None = None,
    warmup: int | None = None,
    endpoint: Endpoint | None = None,
    seed: int | None = None,
    held_out_levels: Sequence[int] | None = None,
    api_key: str | None = None,
    timeout_s: float = 600.0,
    resume: bool = False,
    quick: bool = False,
    console: Console | None = None,
    progress: bool = False,
) -> Profile:
    """Profile the backend at ``base_url`` serving ``model``: hold each load level in a
    closed loop, fit the speed models (``saber.speed.select_model``) and TTFT, write the
    profile to ``out`` and return it.

    Requests come from ``workload`` (a mix of ``workloads``, whose task types are
    ``tasks``; default W3 of the shipped configs) or from a JSONL ``dataset``. Levels
    default to ``DEFAULT_LEVELS``, with ``DEFAULT_POINTS`` counted requests spread over
    them, each level's measured in ``rounds`` visits (default ``DEFAULT_ROUNDS``: up the
    levels, then down; a level whose visits disagree is visited again); the first
    ``warmup`` requests of each visit (default: L at load L) are not counted.
    ``resume`` continues the run kept in ``points_path(out)``: its settings apply, and
    an argument that contradicts them is an error. ``quick`` holds each level for a set
    time instead (``QUICK_LEVEL_S`` at load 1, longer at higher loads, one round): a
    profile to start with in under three minutes, whatever the engine.

    Raises ProfileRunError (one line for the operator) when the backend cannot be
    profiled or the points cannot be fitted. On Ctrl-C it raises ProfileInterrupted,
    carrying the profile written from the points so far when they can be fitted. The
    run's progress goes to ``console`` (default: nothing is printed).
    """
    console = console or Console(stderr=True, quiet=True)
    store = points_path(out)
    given = {
        "level_s": QUICK_LEVEL_S if quick else None,
        "endpoint": endpoint,
        "levels": None if levels is None else tuple(sorted(set(levels))),
        "requests_per_level": requests_per_level,
        "rounds": rounds,
        "warmup": warmup,
        "seed": seed,
    }
    if quick:
        given["rounds"] = given["rounds"] or 1
        given["requests_per_level"] = given["requests_per_level"] or QUICK_MAX_POINTS
    source = f"dataset {dataset}" if dataset is not None else None
    if workload is not None:
        if source is not None:
            raise ProfileRunError("give a workload or a dataset, not both")
        source = f"workload {workload}"
    earlier = PointsFile.resume(store) if resume else None
    if earlier is not None:
        given, source = _resumed(earlier.recorded, store, given, source, model)
        say = f"resuming {store}: {len(earlier.recorded.points)} points so far"
        console.print(say, markup=False, soft_wrap=True)
    settings, supply = _settings(base_url, model, given, source, tasks, workloads)
    file = earlier or PointsFile.create(store, settings.to_json())
    session = Session(
        settings,
        supply,
        file,
        api_key=api_key,
        timeout_s=timeout_s,
        console=console,
        progress=progress,
    )
    try:
        run_session(session)
    except KeyboardInterrupt:
        kept = len(file.recorded.fit_points())
        try:
            partial = _write(out, settings, session.result, file.recorded, held_out_levels)
        except ProfileRunError as exc:
            raise ProfileInterrupted(None, store, kept, str(exc)) from None
        raise ProfileInterrupted(partial, store, kept) from None
    except ProfileRunError:
        if file.recorded.points:
            console.print(f"points so far are kept in {store}", markup=False, soft_wrap=True)
        raise
    try:
        return _write(out, settings, session.result, file.recorded, held_out_levels)
    except ProfileRunError:
        console.print(f"points so far are kept in {store}", markup=False, soft_wrap=True)
        raise


def _resumed(
    recorded: Recorded,
    store: Path,
    given: dict[str, Any],
    source: str | None,
    model: str,
) -> tuple[dict[str, Any], str | None]:
    """The saved settings of a run to resume; ProfileRunError if an argument contradicts them."""
    saved = {"rounds": 1, **recorded.settings}  # runs from before rounds had one
    for key, value in [*given.items(), ("source", source), ("model", model)]:
        old = saved.get(key)
        if value is not None and _norm(value) != _norm(old):
            raise ProfileRunError(
                f"--resume: the run in {store} used {key} {_show(old)}, not {_show(value)}; "
                "drop the option or start afresh without --resume"
            )
    return {k: saved.get(k) for k in given}, saved.get("source")


def _settings(
    base_url: str,
    model: str,
    given: dict[str, Any],
    source: str | None,
    tasks: Mapping[str, TaskType] | None,
    workloads: Mapping[str, Workload] | None,
) -> tuple[RunSettings, Supply]:
    levels = tuple(given["levels"] or DEFAULT_LEVELS)
    if levels[0] < 1:
        raise ProfileRunError("levels must be integers >= 1, e.g. 1,2,4,8")
    per_level = given["requests_per_level"] or math.ceil(DEFAULT_POINTS / len(levels))
    if per_level < 1:
        raise ProfileRunError("requests per level must be >= 1")
    rounds = given["rounds"] or DEFAULT_ROUNDS
    if not 1 <= rounds <= per_level:
        raise ProfileRunError(f"rounds must be between 1 and the requests per level ({per_level})")
    if given["warmup"] is not None and given["warmup"] < 0:
        raise ProfileRunError("--warmup must be >= 0")
    seed = given["seed"] or 0
    supply = _supply(source or f"workload {DEFAULT_WORKLOAD}", tasks, workloads, seed)
    settings = RunSettings(
        base_url=base_url,
        model=model,
        endpoint=given["endpoint"] or "completions",
        source=supply.description,
        levels=levels,
        requests_per_level=per_level,
        warmup=given["warmup"],
        seed=seed,
        rounds=rounds,
        level_s=given.get("level_s"),
    )
    return settings, supply


def _supply(
    source: str,
    tasks: Mapping[str, TaskType] | None,
    workloads: Mapping[str, Workload] | None,
    seed: int,
) -> Supply:
    kind, _, name = source.partition(" ")
    if kind == "dataset":
        return read_dataset(Path(name))
    try:
        tasks = load_tasks() if tasks is None else tasks
        workloads = load_workloads(tasks=dict(tasks)) if workloads is None else workloads
    except ConfigError as exc:
        raise ProfileRunError(" ".join(str(exc).split())) from None
    if name not in workloads:
        raise ProfileRunError(f"unknown workload {name!r}; known: {', '.join(sorted(workloads))}")
    return WorkloadSupply(workloads[name], tasks, seed=seed)


def _write(
    out: Path,
    settings: RunSettings,
    result: SessionResult,
    recorded: Recorded,
    held_out_levels: Sequence[int] | None,
) -> Profile:
    """Fit the points and write the profile; ProfileRunError if they cannot be fitted."""
    profile = fit_profile(settings, result, recorded, held_out_levels)
    save_profile(profile, out)
    try:
        return load_profile(out)
    except ProfileError as exc:  # pragma: no cover - a bug in this tool, not the operator's
        raise ProfileRunError(f"wrote an invalid profile: {exc}") from None


def fit_profile(
    settings: RunSettings,
    result: SessionResult,
    recorded: Recorded,
    held_out_levels: Sequence[int] | None = None,
) -> Profile:
    """The profile of a run's counted points; ProfileRunError if they cannot be fitted."""
    points = recorded.fit_points()
    levels = sorted({p.level for p in points})
    if len(levels) < 2:  # one level's loads vary a little, but say nothing about f(L)
        raise ProfileRunError(
            f"cannot fit {len(points)} points at {len(levels)} load level(s) "
            f"{levels or ''}: at least 2 are needed"
        )
    try:
        fits = fit_speed(points, held_out=held_out_levels)
    except FitError as exc:
        raise ProfileRunError(
            f"cannot fit {len(points)} points at levels {levels}: {exc}"
        ) from None
    saturated = recorded.saturated
    backend = result.backend
    info = ProfilingInfo(
        source=settings.source,
        endpoint=settings.endpoint,
        levels=levels,
        held_out_levels=[round(level) for level in fits.held_out],
        cross_validated=fits.cross_validated,
        scoring=fits.scoring,
        requests_per_level=settings.requests_per_level,
        rounds=settings.rounds,
        remeasured_levels=sorted({p.level for p in recorded.points if p.round >= settings.rounds}),
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
                level_error=r.level_error,
                r2=r.r2,
                mape=r.mape,
                level_r2=r.level_r2,
                in_sample_r2=r.in_sample_r2,
            )
            for r in fits.reports
        ],
        latencies=latency_table(points),
    )
    if settings.level_s is None:
        partial = len(points) < settings.requests_per_level * len(settings.levels)
    else:  # timed visits: partial when a level below any saturation did not end
        top = saturated.level if saturated is not None else math.inf
        partial = any(lv not in recorded.ended for lv in settings.levels if lv < top)
    profile = build_profile(
        fits.best.model,
        [p.load for p in points],
        [p.speed for p in points],
        backend=ProfiledBackend(
            kind=str(backend.kind) if backend else "unknown",
            url=settings.base_url,
            version=backend.version if backend else None,
        ),
        model_name=settings.model,
        notes=_notes(settings, fits.best.kind, partial=partial),
    )
    return profile.model_copy(update={"ttft_fit": fit_ttft(points), "profiling": info})


def _notes(settings: RunSettings, kind: str, *, partial: bool) -> str:
    quick = (
        f"quick: {settings.level_s:g} s at load 1, longer at higher loads; "
        if settings.level_s is not None
        else ""
    )
    note = (
        f"saber-profile: closed loop over HTTP ({settings.endpoint}), {settings.source}, "
        f"levels {list(settings.levels)}; {quick}speed = output tokens / (request sent -> "
        f"end of stream), TTFT included; load = time-averaged requests in flight; kept {kind}"
    )
    return note + ("; partial run" if partial else "")


def _show(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple | list) else str(value)


def _norm(value: Any) -> Any:
    return list(value) if isinstance(value, tuple | list) else value


__all__ = [
    "DEFAULT_LEVELS",
    "DEFAULT_POINTS",
    "DEFAULT_ROUNDS",
    "QUICK_LEVEL_S",
    "fit_profile",
    "profile_backend",
]
