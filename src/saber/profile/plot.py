"""The profile as a picture: measured speeds, every fitted curve with its error, and TTFT."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from saber.profile.points import Point
from saber.profile.report import curve
from saber.speed import Profile


def write_plot(
    path: Path,
    points: Sequence[Point],
    profile: Profile,
    *,
    title: str,
) -> None:
    """Write a PNG of a profile and the points it was fitted to: speed against load (left,
    every model's curve) and TTFT against prompt length (right).

    Uses matplotlib's object API with the Agg canvas, so no display and no global
    pyplot state are involved.
    """
    fig = Figure(figsize=(12, 5), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    loads = np.array([p.load for p in points])
    speeds = np.array([p.speed for p in points])
    info = profile.profiling
    ttft = profile.ttft_fit
    held = np.isin([p.level for p in points], info.held_out_levels if info else [])
    cross_validated = info is not None and info.cross_validated
    scored_label = "scored, left out in turn" if cross_validated else "held out, scored"
    left.scatter(loads[~held], speeds[~held], s=6, alpha=0.3, color="tab:gray", label="measured")
    if held.any():
        left.scatter(
            loads[held], speeds[held], s=6, alpha=0.4, color="tab:orange", label=scored_label
        )
    levels = sorted({p.level for p in points})
    means = [[p for p in points if p.level == level] for level in levels]
    left.scatter(
        [np.mean([p.load for p in group]) for group in means],
        [np.mean([p.speed for p in group]) for group in means],
        marker="x",
        s=40,
        color="black",
        zorder=3,
        label="level means",
    )
    grid = np.linspace(1.0, max(float(loads.max()), 1.0), 300)
    for i, fit in enumerate(info.fits if info else []):
        error = "" if fit.level_error is None else f": level error {fit.level_error:.1%}"
        left.plot(
            grid,
            curve(fit).predict(grid),
            lw=2.5 if i == 0 else 1.2,
            ls="-" if i == 0 else "--",
            label=f"{fit.kind}{' (kept)' if i == 0 else ''}{error}",
        )
    if not info or not info.fits:
        left.plot(grid, profile.speed_model().predict(grid), lw=2.5, label=profile.kind)
    left.set_xlabel("load L (requests in flight, time-averaged)")
    left.set_ylabel("per-request speed (tokens / s, TTFT included)")
    scoring = info.scoring if info and info.scoring else "in-sample"
    left.set_title(f"{title}\nscored {scoring}", fontsize=9)
    left.set_ylim(bottom=0)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)

    with_ttft = [p for p in points if p.ttft_s is not None]
    if with_ttft:
        levels = sorted({p.level for p in with_ttft})
        colors = dict(zip(levels, _colors(len(levels)), strict=True))
        for level in levels:
            pts = [p for p in with_ttft if p.level == level]
            x = np.array([p.prompt_tokens for p in pts], dtype=float)
            y = 1000 * np.array([p.ttft_s for p in pts], dtype=float)
            right.scatter(x, y, s=6, alpha=0.35, color=colors[level], label=f"L={level}")
            if ttft is not None:
                xs = np.linspace(0.0, float(x.max()), 50)
                load = float(np.mean([p.load for p in pts]))
                ys = [1000 * ttft.predict(v, load) for v in xs]
                right.plot(xs, ys, color=colors[level], lw=1)
        fitted = f"linear fit R²={ttft.r2:.3f}" if ttft is not None else "no fit"
        right.set_title(f"time to first token ({fitted})")
        right.set_xlabel("prompt tokens")
        right.set_ylabel("TTFT (ms)")
        right.grid(alpha=0.3)
        right.legend(fontsize=7, ncol=2)
    else:
        right.set_axis_off()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _colors(n: int) -> list[tuple[float, float, float, float]]:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(i / max(n - 1, 1)) for i in range(n)]
