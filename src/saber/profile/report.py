"""What saber-profile prints: per-level measurements, the fits, TTFT, and SLA feasibility.

Everything is read from the profile written (its ``profiling`` section holds every
model's fit and scores) and from the run's points.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rich.console import Console
from rich.table import Table

from saber.profile.feasibility import Feasibility
from saber.profile.points import Recorded
from saber.speed import MODELS, FitScore, Profile, ProfilingInfo, SpeedModel, TTFTFit


def levels_table(recorded: Recorded, held_out: Sequence[float] = ()) -> Table:
    """One row per level: counted points, load really held, speed and TTFT spread."""
    table = Table(title="Measured load levels (warm-up excluded)")
    for column in ("L", "points", "mean load", "speed tok/s", "p10", "p90", "TTFT ms", "note"):
        table.add_column(column, justify="left" if column == "note" else "right")
    levels = sorted({p.level for p in recorded.points} | set(recorded.ended))
    for level in levels:
        pts = recorded.counted(level)
        end = recorded.ended.get(level)
        note = []
        if end is not None and end.status == "saturated":
            note.append(f"saturated (waiting {end.waiting}, running {end.running}): not fitted")
        elif end is None:
            note.append("incomplete")
        rounds = int(recorded.settings.get("rounds", 1))
        if any(p.level == level and p.round >= rounds for p in recorded.points):
            dropped = sorted(r + 1 for lv, r in recorded.dropped if lv == level)
            left_out = f": round {', '.join(map(str, dropped))} left out" if dropped else ""
            note.append(f"measured again{left_out}")
        if level in held_out:
            note.append("scored, left out")
        if not pts:
            table.add_row(str(level), "0", "", "", "", "", "", "; ".join(note))
            continue
        speeds = np.array([p.speed for p in pts])
        ttfts = [p.ttft_s for p in pts if p.ttft_s is not None]
        p10, p90 = np.percentile(speeds, [10, 90])
        table.add_row(
            str(level),
            str(len(pts)),
            f"{np.mean([p.load for p in pts]):.2f}",
            f"{speeds.mean():.1f}",
            f"{p10:.1f}",
            f"{p90:.1f}",
            f"{1000 * np.mean(ttfts):.0f}" if ttfts else "-",
            "; ".join(note),
        )
    return table


def fits_table(info: ProfilingInfo) -> Table:
    """Every speed model: its error at the levels (what ranks them), held-out and in-sample
    R^2, MAPE, its parameters, and which one was kept (the first)."""
    table = Table(title=f"Speed models, scored {info.scoring}")
    numbers = ("level error", "R^2", "MAPE", "R^2 of level means", "in-sample R^2")
    for column in ("model", *numbers, "f(1) tok/s", "parameters", ""):
        table.add_column(column, justify="right" if column in numbers else "left")
    for i, fit in enumerate(info.fits):
        params = ", ".join(f"{k}={v:.4g}" for k, v in fit.params.items())
        table.add_row(
            fit.kind,
            _number(fit.level_error, "{:.2%}"),
            f"{fit.r2:.4f}",
            f"{100 * fit.mape:.2f}%",
            _number(fit.level_r2, "{:.4f}"),
            _number(fit.in_sample_r2, "{:.4f}"),
            f"{curve(fit).predict(1.0):.1f}",
            params,
            "kept" if i == 0 else "",
        )
    return table


def curve(fit: FitScore) -> SpeedModel:
    """The speed model a profile's fit score describes."""
    return MODELS[fit.kind].from_params(**fit.params)


def _number(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


def ttft_line(fit: TTFTFit | None) -> str:
    if fit is None:
        return "TTFT: too few points to fit"
    terms = (
        f"{1000 * fit.intercept_s:.2f} ms + {1e6 * fit.per_prompt_token_s:.2f} us*P"
        f" + {1000 * fit.per_load_s:.3f} ms*(L-1)"
        f" + {1e6 * fit.per_prompt_token_load_s:.4f} us*P*(L-1)"
    )
    return f"TTFT(P, L) = {terms}   R^2={fit.r2:.4f}  MAPE={100 * fit.mape:.1f}%  ({fit.n} points)"


def feasibility_table(rows: Sequence[Feasibility]) -> Table:
    """Per task type: what it needs, the best the backend can do, and up to which load."""
    table = Table(title="SLA feasibility (latency at load L = expected tokens / f(L))")
    columns = (
        "task",
        "tokens",
        "SLA s",
        "needs tok/s",
        "best latency s",
        "TTFT at L=1 s",
        "meets SLA up to L",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "task" else "right")
    for row in rows:
        if row.max_load is None:
            reach = "[red]never[/red]"
        elif row.max_load >= row.profiled_max:
            reach = f">= {row.profiled_max} (highest profiled)"
        else:
            reach = str(row.max_load)
        table.add_row(
            row.task,
            str(row.expected_tokens),
            f"{row.sla_s:g}",
            f"{row.required_speed:.1f}",
            f"{row.best_latency_s:.3f}",
            "-" if row.ttft_s is None else f"{row.ttft_s:.3f}",
            reach,
        )
    return table


def warnings(rows: Sequence[Feasibility]) -> list[str]:
    """One line per SLA that no load can meet."""
    return [
        f"warning: {r.task}'s SLA of {r.sla_s:g} s can never be met: {r.expected_tokens} tokens "
        f"take {r.best_latency_s:.2f} s even alone (f(1) is below the {r.required_speed:.1f} "
        "tok/s it needs); the gateway will serve it best effort"
        for r in rows
        if not r.feasible
    ]


def print_summary(
    console: Console, profile: Profile, recorded: Recorded, rows: Sequence[Feasibility]
) -> None:
    """The tables of a profile written by ``profile_backend`` and of its run's points."""
    info = profile.profiling
    console.print(levels_table(recorded, info.held_out_levels if info else ()))
    if info is not None and info.fits:
        console.print(fits_table(info))
    console.print(ttft_line(profile.ttft_fit), soft_wrap=True)
    console.print(feasibility_table(rows))
    for line in warnings(rows):
        console.print(line, style="yellow", markup=False, soft_wrap=True)
