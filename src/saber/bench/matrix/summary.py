"""The engine matrix's figures: per load, per cell (engine, workload, load grid, SLA
scale), and over the whole matrix.

Goodput and refusals are percentages of a run's requests, averaged over seeds. Per
load, the best static B is chosen in hindsight; a cell's gaps compare a policy with
the best static B and with vLLM alone, as the mean over its loads and at its worst load.
Each gap also has its standard error over the trace seeds (the runs compared serve the
same traces, so the error is that of the per-seed differences): a miss within the 95%
confidence interval this gives (Student's t over the seeds) is one that other draws of
the same traffic may not repeat.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import scipy.stats

from saber.bench._summary import best_static, seed_means, static_of
from saber.bench.matrix.run import CEILING, MatrixRun, Served

VLLM = "vllm"


@dataclass(frozen=True)
class Target:
    gap: str  # a Gap field
    label: str
    floor: float  # a cell meets the target when its gap is >= this


TARGETS = (
    Target("mean_vs_best", "mean vs best static", -0.5),
    Target("worst_vs_best", "worst load vs best static", -3.0),
    Target("worst_vs_vllm", "worst load vs vLLM alone", -1.5),
)
VLLM_STRUGGLES = 80.0  # "vLLM alone below 80% goodput at some load"
WORST_SHOWN = 10
CONFIDENCE = 0.95  # a miss is beyond the traces' noise when its whole interval misses
BEST = "best_static"  # in LoadRow.by_seed: the best static B's goodput on each seed


@dataclass(frozen=True)
class LoadRow:
    """One load of a cell. ``goodput`` and ``refused`` hold vLLM alone (``vllm``), the
    ceiling (``ceiling``: each request alone on an idle engine) and every policy
    (``default``, variants); ``refused`` also the best static B's. ``by_seed``: the
    goodput of vLLM alone, the best static B (``best_static``) and each policy on each
    trace seed, in seed order."""

    rps: float
    multiple: float | None  # of the capacity, on the capacity grid
    seeds: int
    static: dict[int, float]
    best_static_b: int
    goodput: dict[str, float]
    refused: dict[str, float]
    by_seed: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)

    @property
    def best_static(self) -> float:
        return self.static[self.best_static_b]


@dataclass(frozen=True)
class Gap:
    """A policy against the best static B and vLLM alone over a cell's loads, in
    goodput points; ``*_rps`` and ``*_multiple`` are the worst's load; ``*_se`` the
    standard error over the ``seeds`` trace seeds of the gap a target reads (nan under
    2 seeds)."""

    mean_vs_best: float
    worst_vs_best: float
    worst_vs_best_rps: float
    worst_vs_best_multiple: float | None
    mean_vs_vllm: float
    worst_vs_vllm: float
    worst_vs_vllm_rps: float
    worst_vs_vllm_multiple: float | None
    seeds: int = 1
    mean_vs_best_se: float = math.nan
    worst_vs_best_se: float = math.nan
    worst_vs_vllm_se: float = math.nan

    def misses(self) -> list[Target]:
        """The targets this gap misses (a hair's breadth of float error aside)."""
        return [t for t in TARGETS if getattr(self, t.gap) < t.floor - 1e-9]

    def misses_beyond_noise(self) -> list[Target]:
        """The targets it misses with the whole of the gap's ``CONFIDENCE`` interval
        over the trace seeds (all it misses when there is no error to tell: one seed)."""
        if self.seeds < 2:
            return self.misses()
        t_factor = float(scipy.stats.t.ppf(0.5 + CONFIDENCE / 2, self.seeds - 1))
        return [
            t
            for t in self.misses()
            if not getattr(self, t.gap) + t_factor * getattr(self, f"{t.gap}_se") >= t.floor - 1e-9
        ]


@dataclass(frozen=True)
class MatrixCell:
    preset: str
    workload: str
    grid: str
    sla_scale: float
    capacity: float  # requests/s at which vLLM alone saturates this engine on this workload
    loads: list[LoadRow]
    gaps: dict[str, Gap]  # per policy

    @property
    def key(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "workload": self.workload,
            "grid": self.grid,
            "sla_scale": self.sla_scale,
        }


def load_row(rps: float, multiple: float | None, runs: Sequence[Mapping[str, Served]]) -> LoadRow:
    """``runs``: one mapping of run name ("static:B", "vllm", "saber:<policy>") per seed,
    in seed order."""
    goodput, refused = seed_means(runs), seed_means(runs, "refused")
    static = static_of(goodput)
    best = best_static(static)
    compared = {VLLM: VLLM, BEST: f"static:{best}"}
    compared |= {n.removeprefix("saber:"): n for n in runs[0] if n.startswith("saber:")}

    def others(by_run: Mapping[str, float]) -> dict[str, float]:
        """vLLM alone and each policy, by name."""
        return {
            n.removeprefix("saber:"): v for n, v in by_run.items() if not n.startswith("static:")
        }

    return LoadRow(
        rps=rps,
        multiple=multiple,
        seeds=len(runs),
        static=static,
        best_static_b=best,
        goodput=others(goodput),
        refused={**others(refused), BEST: refused[f"static:{best}"]},
        by_seed={k: tuple(100 * r[n].goodput for r in runs) for k, n in compared.items()},
    )


def _se(diffs: Sequence[float]) -> float:
    """The standard error of the mean of per-seed differences (nan under 2 seeds)."""
    return statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan


def _diffs(row: LoadRow, policy: str, than: str) -> list[float]:
    mine, theirs = row.by_seed.get(policy, ()), row.by_seed.get(than, ())
    return [a - b for a, b in zip(mine, theirs, strict=True)]


def gap(loads: Sequence[LoadRow], policy: str) -> Gap:
    vs_best = [r.goodput[policy] - r.best_static for r in loads]
    vs_vllm = [r.goodput[policy] - r.goodput[VLLM] for r in loads]
    at_best = min(range(len(loads)), key=vs_best.__getitem__)
    at_vllm = min(range(len(loads)), key=vs_vllm.__getitem__)
    per_load = [_diffs(r, policy, BEST) for r in loads]
    # Each seed's mean over the loads (a seed draws the same lengths at every load).
    by_seed: list[float] = []
    if len({len(d) for d in per_load}) == 1:
        by_seed = [statistics.fmean(col) for col in zip(*per_load, strict=True)]
    return Gap(
        mean_vs_best=statistics.fmean(vs_best),
        worst_vs_best=vs_best[at_best],
        worst_vs_best_rps=loads[at_best].rps,
        worst_vs_best_multiple=loads[at_best].multiple,
        mean_vs_vllm=statistics.fmean(vs_vllm),
        worst_vs_vllm=vs_vllm[at_vllm],
        worst_vs_vllm_rps=loads[at_vllm].rps,
        worst_vs_vllm_multiple=loads[at_vllm].multiple,
        seeds=min(r.seeds for r in loads),
        mean_vs_best_se=_se(by_seed),
        worst_vs_best_se=_se(per_load[at_best]),
        worst_vs_vllm_se=_se(_diffs(loads[at_vllm], policy, VLLM)),
    )


def summarize_matrix(run: MatrixRun) -> list[MatrixCell]:
    """Every cell of the run, in the matrix's order (engine, workload, grid, SLA scale)."""
    m = run.matrix
    by_cell: dict[tuple, dict[tuple[float, float | None], list]] = defaultdict(
        lambda: defaultdict(list)
    )
    for res in run.results:
        p = res.point
        for scale, runs in res.runs.items():
            by_cell[(p.preset, p.workload, p.grid, scale)][(p.rps, p.multiple)].append(
                (p.seed, runs)
            )
    cells = []
    for preset in m.presets:
        for workload in m.workloads:
            for grid in m.grids:
                for scale in m.sla_scales:
                    by_load = by_cell[(preset, workload, grid, scale)]
                    loads = [
                        load_row(r, x, [runs for _, runs in sorted(seeds, key=lambda s: s[0])])
                        for (r, x), seeds in sorted(by_load.items())
                    ]
                    cells.append(
                        MatrixCell(
                            preset,
                            workload,
                            grid,
                            scale,
                            run.fits[preset].capacity[workload],
                            loads,
                            {policy: gap(loads, policy) for policy in m.policies},
                        )
                    )
    return cells


def summary(cells: Sequence[MatrixCell], policies: Sequence[str]) -> dict[str, Any]:
    """Over the whole matrix, per policy: the cells that miss each target (and of
    those, the cells that miss one beyond the traces' noise), the worst cells, the
    paper's engine at the paper's loads and SLAs, and the gain over vLLM alone where
    vLLM alone falls below 80% goodput."""
    out: dict[str, Any] = {"cells": len(cells), "targets": {}, "worst": {}, "paper": {}}
    out["vllm_struggles"] = {}
    workloads = sorted({c.workload for c in cells})
    paper = [c for c in cells if (c.preset, c.grid, c.sla_scale) == ("paper", "paper", 1.0)]
    for policy in policies:
        missed = [c.gaps[policy].misses() for c in cells]
        out["targets"][policy] = {
            **{t.gap: sum(t in m for m in missed) for t in TARGETS},
            "any": sum(bool(m) for m in missed),
            "beyond_noise": sum(bool(c.gaps[policy].misses_beyond_noise()) for c in cells),
        }
        worst = sorted(cells, key=lambda c: c.gaps[policy].mean_vs_best)[:WORST_SHOWN]
        out["worst"][policy] = [{**c.key, **dataclasses.asdict(c.gaps[policy])} for c in worst]
        out["paper"][policy] = {c.workload: c.gaps[policy].mean_vs_best for c in paper}
        out["vllm_struggles"][policy] = {
            w: _struggles([c for c in cells if c.workload == w], policy) for w in workloads
        }
    return out


def _struggles(cells: Sequence[MatrixCell], policy: str) -> dict[str, Any]:
    """Over the cells where vLLM alone is below 80% at some load: the policy's gain
    over vLLM alone, pooled over those loads, and over all their loads; and the room
    there, the ceiling over vLLM alone, which no policy's gain passes."""
    hit = [c for c in cells if any(r.goodput[VLLM] < VLLM_STRUGGLES for r in c.loads)]
    loads = [r for c in hit for r in c.loads]
    below = [r for r in loads if r.goodput[VLLM] < VLLM_STRUGGLES]

    def mean_over(rows: Sequence[LoadRow], run: str) -> float:
        gains = [r.goodput[run] - r.goodput[VLLM] for r in rows]
        return statistics.fmean(gains) if gains else float("nan")

    return {
        "cells": len(hit),
        "loads_below": len(below),
        "gain_where_below": mean_over(below, policy),
        "gain_all_loads": mean_over(loads, policy),
        "room_where_below": mean_over(below, CEILING),
    }
