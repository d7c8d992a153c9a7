"""The engine matrix as heatmaps: engines as rows (slowest first), one column per
load grid x workload x SLA scale, a policy's gap in goodput points as the colour
(red: it loses, blue: it gains), each cell annotated with its value."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import TwoSlopeNorm

from saber.bench.matrix.run import Matrix
from saber.bench.matrix.summary import MatrixCell

PANELS = (
    ("mean_vs_best", "mean over loads, vs the best static B per load"),
    ("worst_vs_best", "worst load, vs the best static B"),
    ("worst_vs_vllm", "worst load, vs vLLM alone (max_num_seqs 256)"),
)


def _grid(
    matrix: Matrix, cells: Sequence[MatrixCell], policy: str, gap: str
) -> tuple[list[str], list[tuple[str, str, float]], np.ndarray]:
    by = {(c.preset, c.grid, c.workload, c.sla_scale): c for c in cells}
    # Slowest engine on top: ordered by vLLM alone's capacity, averaged over workloads.
    speed = {p: np.mean([c.capacity for c in cells if c.preset == p]) for p in matrix.presets}
    rows = sorted(matrix.presets, key=speed.__getitem__)
    cols = [(g, w, s) for g in matrix.grids for w in matrix.workloads for s in matrix.sla_scales]
    values = np.array(
        [[getattr(by[(p, g, w, s)].gaps[policy], gap) for g, w, s in cols] for p in rows]
    )
    return rows, cols, values


def _grid_label(matrix: Matrix, grid: str) -> str:
    if grid == "paper":
        return f"paper loads (RPS {min(matrix.rps):g}..{max(matrix.rps):g})"
    low, high = min(matrix.multiples), max(matrix.multiples)
    return f"capacity loads ({low:g}x..{high:g}x vLLM alone's saturation rate)"


def heatmap(matrix: Matrix, cells: Sequence[MatrixCell], policy: str, path: Path) -> None:
    """One panel per gap of ``PANELS``, stacked, for ``policy``."""
    ncols = len(matrix.grids) * len(matrix.workloads) * len(matrix.sla_scales)
    fig, axes = plt.subplots(
        len(PANELS),
        1,
        figsize=(3.0 + 0.62 * ncols, len(PANELS) * (1.6 + 0.3 * len(matrix.presets))),
        squeeze=False,
        layout="constrained",
    )
    for ax, (gap, title) in zip(axes[:, 0], PANELS, strict=True):
        rows, cols, values = _grid(matrix, cells, policy, gap)
        # Losses to 5 points and gains to 5 points span each half at least.
        norm = TwoSlopeNorm(
            vmin=min(float(np.nanmin(values)), -5.0),
            vcenter=0.0,
            vmax=max(float(np.nanmax(values)), 5.0),
        )
        im = ax.imshow(values, cmap="RdBu", norm=norm, aspect="auto")
        for (i, j), v in np.ndenumerate(values):
            dark = abs(float(norm(v)) - 0.5) > 0.3
            color = "white" if dark else "black"
            ax.text(j, i, f"{v:+.1f}", ha="center", va="center", fontsize=7, color=color)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_xticks(range(len(cols)), [f"{w}\nx{s:g}" for _, w, s in cols], fontsize=7)
        for j in range(1, len(cols)):
            if cols[j][0] != cols[j - 1][0]:
                ax.axvline(j - 0.5, color="black", lw=2.5)
            elif cols[j][1] != cols[j - 1][1]:
                ax.axvline(j - 0.5, color="white", lw=1.5)
        groups = [j for j in range(len(cols)) if j == 0 or cols[j][0] != cols[j - 1][0]]
        ends = [*groups[1:], len(cols)]
        top = ax.secondary_xaxis("top")
        top.set_xticks(
            [(a + b - 1) / 2 for a, b in zip(groups, ends, strict=True)],
            [_grid_label(matrix, cols[j][0]) for j in groups],
            fontsize=8,
        )
        top.tick_params(length=0)
        ax.set_title(f"{policy}: goodput points, {title}", fontsize=10)
        fig.colorbar(im, ax=ax, shrink=0.9, pad=0.01)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_heatmaps(matrix: Matrix, cells: Sequence[MatrixCell], out: Path) -> list[Path]:
    """``matrix_<policy>.png`` for the default and each variant."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for policy in matrix.policies:
        path = out / f"matrix_{policy.replace('+', '_')}.png"
        heatmap(matrix, cells, policy, path)
        paths.append(path)
    return paths
