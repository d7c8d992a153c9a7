"""A pool run as one figure: goodput against the load, one line per policy, one panel
per workload."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from saber.bench.cluster.report import rows
from saber.bench.cluster.run import ClusterRun, describe_pool


def goodput_vs_load(run: ClusterRun, path: Path) -> Path:
    """Goodput (%) against the load as a multiple of the pool's capacity; a dashed
    line: the ceiling, each request alone on the pool's best replica."""
    data = rows(run)
    workloads = list(dict.fromkeys(r["workload"] for r in data))
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 3.8), squeeze=False)
    for ax, workload in zip(axes[0], workloads, strict=True):
        for policy in run.bench.policies:
            line = sorted(
                (r["multiple"], r["goodput"])
                for r in data
                if r["workload"] == workload and r["policy"] == policy
            )
            ax.plot([m for m, _ in line], [g for _, g in line], "o-", label=policy)
        top = sorted({(r["multiple"], r["ceiling"]) for r in data if r["workload"] == workload})
        ax.plot([m for m, _ in top], [c for _, c in top], "k--", lw=1, label="ceiling (alone)")
        ax.set_title(f"{workload} (capacity {run.capacity[workload]:.3g} req/s)")
        ax.set_xlabel("load (x the pool's saturation rate)")
        ax.set_ylabel("goodput (%)")
        ax.set_ylim(0, 102)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"{describe_pool(run.bench.pool)}: routers, and the gateway over the pool", fontsize=10
    )
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
