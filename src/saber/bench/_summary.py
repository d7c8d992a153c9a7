"""From per-run results to the paper's figures of merit, per (workload, RPS, mode)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from saber.bench._grid import DEFAULT
from saber.bench._runner import CellResult


def cv(ratios: np.ndarray) -> float:
    """Coefficient of variation (std/mean) of completion-time/SLA ratios."""
    finite = ratios[np.isfinite(ratios)]
    if finite.size < 2 or finite.mean() == 0:
        return float("nan")
    return float(finite.std() / finite.mean())


def json_name(variant: str) -> str:
    """A variant's prefix in JSON keys: ``default``, else ``saber_<model>_<option>...``."""
    return DEFAULT if variant == DEFAULT else f"saber_{variant.replace('+', '_')}"


def seed_means(runs: Sequence[Mapping[str, Any]], field: str = "goodput") -> dict[str, float]:
    """Each run's ``field`` (goodput or refused, shares) in percent, averaged over seeds;
    ``runs`` holds one mapping of run name to stats (RunStats or alike) per seed."""
    return {n: 100 * float(np.mean([getattr(r[n], field) for r in runs])) for n in runs[0]}


def static_of(by_run: Mapping[str, float]) -> dict[int, float]:
    """The ``static:B`` runs' figures, by B."""
    return {int(n.split(":")[1]): g for n, g in by_run.items() if n.startswith("static:")}


def best_static(static: Mapping[int, float]) -> int:
    """The hindsight-best B: the highest goodput, the smallest B on a tie."""
    return max(static, key=lambda b: (static[b], -b))


@dataclass(frozen=True)
class Row:
    workload: str
    rps: float
    mode: str
    best_static_b: int
    best_static_goodput: float
    saber_goodput: float
    diff: float  # saber - best static, in goodput points (0..100)
    saber_cv: float
    static_cv: float
    saber_ratio_mean: float
    saber_ratio_std: float
    static_ratio_mean: float
    static_ratio_std: float
    variants: dict[str, float]  # SABER goodput per variant (speed model + options)
    static: dict[int, float]  # static goodput per B
    variant_ratio_mean: dict[str, float]  # mean completion-time/SLA per variant
    variant_ratio_std: dict[str, float]
    refused: dict[str, float]  # per variant: % of requests never served

    def to_json(self) -> dict:
        out = asdict(self)
        out.pop("variants")
        out.pop("variant_ratio_mean")
        out.pop("variant_ratio_std")
        out.pop("refused")
        for kind, g in self.variants.items():
            name = json_name(kind)
            out[f"{name}_goodput"] = g
            out[f"{name}_refused"] = self.refused[kind]
            out[f"{name}_ratio_mean"] = self.variant_ratio_mean[kind]
            out[f"{name}_ratio_std"] = self.variant_ratio_std[kind]
        out["static"] = {str(b): g for b, g in self.static.items()}
        return out


def _ratio_stats(ratios: np.ndarray) -> tuple[float, float]:
    """Mean and std of the served requests' ratios; NaN (shown as "-") when a run served
    none, rather than numpy's "Mean of empty slice" warnings."""
    finite = ratios[np.isfinite(ratios)]
    if finite.size == 0:
        return float("nan"), float("nan")
    return float(finite.mean()), float(finite.std())


def summarize_cells(results: Iterable[CellResult], main_variant: str = "usl") -> list[Row]:
    """Average goodput over seeds; pool ratios over seeds. Goodput is in 0..100."""
    groups: dict[tuple[str, float, str], list[CellResult]] = defaultdict(list)
    for res in results:
        groups[(res.cell.workload, res.cell.rps, res.cell.mode)].append(res)
    rows = []
    for (workload, rps, mode), cells in sorted(groups.items()):
        names = cells[0].runs.keys()
        goodput = seed_means([c.runs for c in cells])
        refused = seed_means([c.runs for c in cells], "refused")
        ratios = {n: np.concatenate([c.runs[n].ratios for c in cells]) for n in names}
        static = static_of(goodput)
        best_b = best_static(static)
        variants = {n.split(":")[1]: g for n, g in goodput.items() if n.startswith("saber:")}
        saber_name = f"saber:{main_variant}"
        by_variant = {v: _ratio_stats(ratios[f"saber:{v}"]) for v in variants}
        s_mean, s_std = _ratio_stats(ratios[saber_name])
        b_mean, b_std = _ratio_stats(ratios[f"static:{best_b}"])
        rows.append(
            Row(
                workload=workload,
                rps=rps,
                mode=mode,
                best_static_b=best_b,
                best_static_goodput=static[best_b],
                saber_goodput=variants[main_variant],
                diff=variants[main_variant] - static[best_b],
                saber_cv=cv(ratios[saber_name]),
                static_cv=cv(ratios[f"static:{best_b}"]),
                saber_ratio_mean=s_mean,
                saber_ratio_std=s_std,
                static_ratio_mean=b_mean,
                static_ratio_std=b_std,
                variants=variants,
                static=static,
                variant_ratio_mean={v: by_variant[v][0] for v in variants},
                variant_ratio_std={v: by_variant[v][1] for v in variants},
                refused={v: refused[f"saber:{v}"] for v in variants},
            )
        )
    return rows


@dataclass(frozen=True)
class WorkloadSummary:
    workload: str
    mode: str
    variant: str  # the SABER variant summarized
    mean_diff: float  # averaged over the whole RPS sweep
    min_diff_rps_ge_5: float
    diff_at_max_rps: float
    max_rps: float
    saber_cv: float  # CV of the per-RPS mean ratios, as in the paper's Fig. 6
    static_cv: float
    best_b_counts: dict[int, int]


def summarize_workloads(rows: Sequence[Row], variant: str = "usl") -> list[WorkloadSummary]:
    """Per (workload, mode): ``variant`` against the best static B over the RPS sweep."""
    out = []
    keys = sorted({(r.workload, r.mode) for r in rows})
    for workload, mode in keys:
        mine = sorted(
            (r for r in rows if (r.workload, r.mode) == (workload, mode)), key=lambda r: r.rps
        )
        diffs = [r.variants[variant] - r.best_static_goodput for r in mine]
        loaded = [d for r, d in zip(mine, diffs, strict=True) if r.rps >= 5] or [float("nan")]
        counts: dict[int, int] = defaultdict(int)
        for r in mine:
            counts[r.best_static_b] += 1
        out.append(
            WorkloadSummary(
                workload=workload,
                mode=mode,
                variant=variant,
                mean_diff=float(np.mean(diffs)),
                min_diff_rps_ge_5=float(min(loaded)),
                diff_at_max_rps=diffs[-1],
                max_rps=mine[-1].rps,
                saber_cv=cv(np.array([r.variant_ratio_mean[variant] for r in mine])),
                static_cv=cv(np.array([r.static_ratio_mean for r in mine])),
                best_b_counts=dict(sorted(counts.items())),
            )
        )
    return out
