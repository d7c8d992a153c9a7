"""PNG figures in the manner of the paper's Fig. 1, 5, 6 and 7."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from saber.bench._summary import Row

# Drawn in Fig. 5 and 6 next to the best static B: the paper's SABER, line 10 read
# as its pseudocode is written, which reproduces the paper's figures, and the shipped
# default (docs/bench.md).
HIGHLIGHTED = {
    "usl": "SABER (faithful)",
    "usl+unprotected": "SABER, line 10 as written (any())",
    "usl+closed-loop": "SABER closed loop (default)",
}


def _by(rows: Sequence[Row], mode: str) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for r in rows:
        if r.mode == mode:
            out.setdefault(r.workload, []).append(r)
    return {w: sorted(rs, key=lambda r: r.rps) for w, rs in sorted(out.items())}


def heatmap(rows: Sequence[Row], mode: str, path: Path) -> None:
    """Fig. 1: static goodput over B x RPS, the best B per RPS boxed."""
    groups = _by(rows, mode)
    fig, axes = plt.subplots(1, len(groups), figsize=(5.5 * len(groups), 4.8), squeeze=False)
    for ax, (workload, rs) in zip(axes[0], groups.items(), strict=True):
        bs = sorted(rs[0].static)
        grid = np.array([[r.static[b] for r in rs] for b in bs])
        im = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=100, aspect="auto", origin="lower")
        ax.set_xticks(range(len(rs)), [f"{r.rps:g}" for r in rs])
        ax.set_yticks(range(len(bs)), [str(b) for b in bs])
        for j, r in enumerate(rs):
            i = bs.index(r.best_static_b)
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="blue", lw=2))
            for k, b in enumerate(bs):
                ax.text(j, k, f"{r.static[b]:.0f}", ha="center", va="center", fontsize=6)
        ax.set_title(f"{workload}: static goodput (%)")
        ax.set_xlabel("RPS")
        ax.set_ylabel("max_num_seqs (B)")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def goodput_vs_rps(rows: Sequence[Row], mode: str, path: Path, variants: bool = False) -> None:
    """Fig. 5 (SABER vs best static) or, with ``variants``, Fig. 7 (each speed model)."""
    groups = _by(rows, mode)
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 3.8), squeeze=False)
    for ax, (workload, rs) in zip(axes[0], groups.items(), strict=True):
        x = [r.rps for r in rs]
        ax.plot(x, [r.best_static_goodput for r in rs], "s--", color="grey", label="best static")
        kinds = sorted(rs[0].variants) if variants else _highlighted(rs[0])
        for kind in kinds:
            label = f"SABER-{kind}" if variants else HIGHLIGHTED[kind]
            ax.plot(x, [r.variants[kind] for r in rs], "o-", label=label)
        ax.set_title(f"{workload} ({mode})")
        ax.set_xlabel("RPS")
        ax.set_ylabel("goodput (%)")
        ax.set_ylim(0, 102)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def ratio_bands(rows: Sequence[Row], mode: str, path: Path) -> None:
    """Fig. 6: mean completion-time/SLA with one-standard-deviation bands."""
    groups = _by(rows, mode)
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 3.8), squeeze=False)
    for ax, (workload, rs) in zip(axes[0], groups.items(), strict=True):
        x = np.array([r.rps for r in rs])
        bands = [
            (
                "best static",
                [r.static_ratio_mean for r in rs],
                [r.static_ratio_std for r in rs],
                "tab:red",
            )
        ]
        for kind, color in zip(_highlighted(rs[0]), ("tab:blue", "tab:green"), strict=False):
            bands.append(
                (
                    HIGHLIGHTED[kind],
                    [r.variant_ratio_mean[kind] for r in rs],
                    [r.variant_ratio_std[kind] for r in rs],
                    color,
                )
            )
        for label, mean, std, color in bands:
            m, s = np.array(mean), np.array(std)
            ax.plot(x, m, "o-", color=color, label=label)
            ax.fill_between(x, m - s, m + s, color=color, alpha=0.15)
        ax.axhline(1.0, color="k", ls=":", lw=1)
        ax.set_title(f"{workload} ({mode})")
        ax.set_xlabel("RPS")
        ax.set_ylabel("completion time / SLA")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _highlighted(row: Row) -> list[str]:
    return [k for k in HIGHLIGHTED if k in row.variants]


def write_all(rows: Sequence[Row], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for mode in sorted({r.mode for r in rows}):
        for name, fn in (
            ("fig1_heatmap", heatmap),
            ("fig5_goodput", goodput_vs_rps),
            ("fig6_ratio_bands", ratio_bands),
        ):
            path = out / f"{name}_{mode}.png"
            fn(rows, mode, path)
            paths.append(path)
        path = out / f"fig7_variants_{mode}.png"
        goodput_vs_rps(rows, mode, path, variants=True)
        paths.append(path)
    return paths
