"""Goodput against load: one panel per engine, a line per policy, the mean over the
windows (the gaps' intervals are in the table: windows differ more than the policies
on one window do)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from saber.bench._grid import DEFAULT
from saber.bench.matrix.run import CEILING
from saber.bench.replay.report import LoadSummary
from saber.bench.replay.run import VLLM, ReplayRun

_STYLE: dict[str, dict[str, Any]] = {
    VLLM: {"color": "tab:gray", "ls": "--", "label": "vLLM alone"},
    "best": {"color": "tab:green", "ls": ":", "label": "best static B (hindsight)"},
    DEFAULT: {"color": "tab:blue", "lw": 2.2, "label": "default"},
    "told": {"color": "tab:red", "label": "default told every length"},
    CEILING: {"color": "black", "ls": "-.", "lw": 0.8, "label": "each request alone"},
}

_OTHER_COLOURS = ("tab:purple", "tab:orange", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def goodput_vs_load(run: ReplayRun, loads: Sequence[LoadSummary], path: Path) -> Path:
    presets = run.replay.presets
    fig, axes = plt.subplots(
        1,
        len(presets),
        figsize=(4.6 * len(presets) + 2.2, 3.9),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    others = [p for p in run.policies if p not in _STYLE]
    for ax, preset in zip(axes[0], presets, strict=True):
        mine = sorted((s for s in loads if s.preset == preset), key=lambda s: s.multiple)
        x = [s.multiple for s in mine]
        series = {
            VLLM: [s.row.goodput[VLLM] for s in mine],
            "best": [s.row.best_static for s in mine],
            **{p: [s.row.goodput[p] for s in mine] for p in (*run.policies, CEILING)},
        }
        # The default last, on top of any policy that decides as it does.
        for name in sorted(series, key=lambda n: n == DEFAULT):
            ys = series[name]
            style: dict[str, Any] = _STYLE.get(name, {"lw": 1.0, "alpha": 0.8, "label": name})
            if name in others:
                style = {**style, "color": _OTHER_COLOURS[others.index(name) % len(_OTHER_COLOURS)]}
            ax.plot(x, ys, marker="o", ms=3, **style)
        ax.set_title(preset, fontsize=10)
        base = "capacity" if run.replay.rate_of == "capacity" else "the trace's rate"
        ax.set_xlabel(f"load (x {base})")
        ax.set_ylim(0, 102)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("requests within SLA (%)")
    fig.legend(*axes[0][0].get_legend_handles_labels(), fontsize=7, loc="outside right center")
    fig.suptitle(f"{run.trace.name}: {run.replay.windows} windows of {run.trace.size}", fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
