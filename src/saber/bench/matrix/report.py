"""The engine matrix as JSON (every per-load figure, to re-aggregate) and markdown
(the global summary, one row per cell, one row per load)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from saber.bench._report import dumps
from saber.bench._summary import json_name
from saber.bench.matrix.run import CEILING, Matrix, MatrixRun
from saber.bench.matrix.summary import (
    BEST,
    CONFIDENCE,
    TARGETS,
    VLLM,
    VLLM_STRUGGLES,
    LoadRow,
    MatrixCell,
    summary,
)


def to_json(run: MatrixRun, cells: Sequence[MatrixCell]) -> str:
    """Everything: the matrix, each engine's fit and capacity, one row per load (every
    figure, to re-aggregate), each cell's gaps and the summary."""
    policies = run.matrix.policies
    return dumps(
        {
            "matrix": dataclasses.asdict(run.matrix),
            "policies": list(policies),
            "engines": {
                name: {
                    "capacity_rps": fit.capacity,
                    "speed_models": {k: dict(m.params) for k, m in fit.models.items()},
                    "ttft": None if fit.ttft is None else fit.ttft.model_dump(),
                }
                for name, fit in run.fits.items()
            },
            "targets": [dataclasses.asdict(t) for t in TARGETS],
            "rows": [_row(c, r, policies) for c in cells for r in c.loads],
            "cells": [
                {
                    **c.key,
                    "capacity_rps": c.capacity,
                    **{json_name(p): dataclasses.asdict(c.gaps[p]) for p in policies},
                }
                for c in cells
            ],
            "summary": summary(cells, policies),
        }
    )


def _row(cell: MatrixCell, r: LoadRow, policies: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        **cell.key,
        "capacity_rps": cell.capacity,
        "rps": r.rps,
        "multiple": r.multiple,
        "seeds": r.seeds,
        "best_static_b": r.best_static_b,
        "best_static_goodput": r.best_static,
        "best_static_refused": r.refused["best_static"],
        "static": {str(b): g for b, g in r.static.items()},
        "vllm_goodput": r.goodput[VLLM],
        "vllm_refused": r.refused[VLLM],
        "ceiling_goodput": r.goodput[CEILING],
    }
    for p in policies:
        out[f"{json_name(p)}_goodput"] = r.goodput[p]
        out[f"{json_name(p)}_refused"] = r.refused[p]
    for name, key in ((VLLM, VLLM), (BEST, BEST), *((json_name(p), p) for p in policies)):
        out[f"{name}_goodput_by_seed"] = list(r.by_seed.get(key, ()))
    return out


# -- markdown ---------------------------------------------------------------


def _pts(x: float) -> str:
    return "-" if x != x else f"{x:+.1f}"


def _load(r: LoadRow) -> str:
    return f"{r.rps:g}" if r.multiple is None else f"{r.multiple:g}x ({r.rps:.3g})"


def _worst(value: float, rps: float, multiple: float | None) -> str:
    """A worst load's gap and where: RPS on the paper grid, the multiple on the other."""
    return f"{_pts(value)} ({rps:g})" if multiple is None else f"{_pts(value)} ({multiple:g}x)"


def _scale(x: float) -> str:
    return f"x{x:g}"


def summary_markdown(matrix: Matrix, cells: Sequence[MatrixCell]) -> str:
    policies = matrix.policies
    s = summary(cells, policies)
    slos = "" if matrix.goodput is None else f", SLOs --goodput {matrix.goodput.describe()!r}"
    out = [
        "## Engine matrix: summary\n",
        f"{len(matrix.presets)} engines x {len(matrix.workloads)} workloads x "
        f"{len(matrix.grids)} load grids x {len(matrix.sla_scales)} SLA scales = "
        f"{len(cells)} cells; {matrix.seeds} trace(s) per load (seeds {matrix.seed_base}.."
        f"{matrix.seed_base + matrix.seeds - 1}), {matrix.requests} requests each, {matrix.mode} "
        f"mode{slos}. Goodput points; best static = the best B per load in hindsight.\n",
        "Cells that miss each target; the last column counts those that miss one with the "
        f"whole {CONFIDENCE:.0%} confidence interval of the gap over the trace seeds "
        "(Student's t; the others may be the draw of the traces):\n",
        "| policy | "
        + " | ".join(f"{t.label} >= {t.floor:g}" for t in TARGETS)
        + f" | any | any, beyond its {CONFIDENCE:.0%} interval |",
        "|---|" + "---|" * (len(TARGETS) + 2),
    ]
    for p in policies:
        t = s["targets"][p]
        counts = [t[x.gap] for x in TARGETS] + [t["any"], t["beyond_noise"]]
        out.append(f"| {p} | " + " | ".join(f"{n} / {len(cells)}" for n in counts) + " |")
    if any(s["paper"][p] for p in policies):
        workloads = list(next(iter(s["paper"].values())))
        out += [
            "\nThe paper's engine at the paper's loads, SLA x1, mean vs best static:\n",
            "| policy | " + " | ".join(workloads) + " |",
            "|---|" + "---|" * len(workloads),
        ]
        for p in policies:
            out.append(f"| {p} | " + " | ".join(_pts(s["paper"][p][w]) for w in workloads) + " |")
    out += [
        f"\nCells where vLLM alone is below {VLLM_STRUGGLES:g}% at some load: gain over "
        "vLLM alone, pooled over those cells' loads; the room is the ceiling (each request "
        "alone on an idle engine) over vLLM alone at the same loads, which no gain passes:\n",
        "| policy | workload | cells | loads < 80% | mean where vLLM < 80% | room there "
        "| mean, all loads |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in policies:
        for w, g in s["vllm_struggles"][p].items():
            out.append(
                f"| {p} | {w} | {g['cells']} | {g['loads_below']} | "
                f"{_pts(g['gain_where_below'])} | {_pts(g['room_where_below'])} | "
                f"{_pts(g['gain_all_loads'])} |"
            )
    for p in policies:
        out += [
            f"\nWorst cells, {p} (by mean vs best static):\n",
            "| engine | workload | grid | SLA | vs best static: mean | worst (load) "
            "| vs vLLM alone: mean | worst (load) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for w in s["worst"][p]:
            out.append(
                f"| {w['preset']} | {w['workload']} | {w['grid']} | {_scale(w['sla_scale'])} | "
                f"{_pts(w['mean_vs_best'])} | "
                f"{_worst(w['worst_vs_best'], w['worst_vs_best_rps'], w['worst_vs_best_multiple'])}"
                f" | {_pts(w['mean_vs_vllm'])} | "
                f"{_worst(w['worst_vs_vllm'], w['worst_vs_vllm_rps'], w['worst_vs_vllm_multiple'])}"
                " |"
            )
    return "\n".join(out) + "\n"


def cells_markdown(matrix: Matrix, cells: Sequence[MatrixCell]) -> str:
    """One row per cell: each policy's gaps; a target missed is in bold, in italics
    too when its ``CONFIDENCE`` interval over the trace seeds reaches the floor."""
    policies = matrix.policies
    head = ["engine", "workload", "grid", "SLA", "capacity (RPS)"]
    for p in policies:
        head += [f"{p} vs best: mean", "worst (load)", "vs vLLM: mean", "worst (load)"]
    out = [
        "## Cells\n",
        "A target missed is in bold; in bold italics when the gap's "
        f"{CONFIDENCE:.0%} confidence interval over the trace seeds reaches the target.\n",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for c in cells:
        row = [c.preset, c.workload, c.grid, _scale(c.sla_scale), f"{c.capacity:.3g}"]
        for p in policies:
            g = c.gaps[p]

            missed = {t.gap for t in g.misses()}
            clear = {t.gap for t in g.misses_beyond_noise()}

            def mark(
                name: str, text: str, missed: set[str] = missed, clear: set[str] = clear
            ) -> str:
                if name not in missed:
                    return text
                return f"**{text}**" if name in clear else f"***{text}***"

            worst_best = _worst(g.worst_vs_best, g.worst_vs_best_rps, g.worst_vs_best_multiple)
            worst_vllm = _worst(g.worst_vs_vllm, g.worst_vs_vllm_rps, g.worst_vs_vllm_multiple)
            row += [
                mark("mean_vs_best", _pts(g.mean_vs_best)),
                mark("worst_vs_best", worst_best),
                _pts(g.mean_vs_vllm),
                mark("worst_vs_vllm", worst_vllm),
            ]
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


def loads_markdown(matrix: Matrix, cells: Sequence[MatrixCell]) -> str:
    """One row per load: goodput % of the best static B, vLLM alone, the ceiling and each
    policy, and the % of requests each refused (never served)."""
    policies = matrix.policies
    head = ["engine", "workload", "grid", "SLA", "load", "best B", "best static", "vLLM"]
    head += ["ceiling"]
    refusers = ("best_static", VLLM, *policies)
    head += [*policies, f"refused %: {', '.join(refusers)}"]
    out = ["## Per load\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cells:
        for r in c.loads:
            row = [c.preset, c.workload, c.grid, _scale(c.sla_scale), _load(r)]
            row += [str(r.best_static_b), f"{r.best_static:.1f}", f"{r.goodput[VLLM]:.1f}"]
            row.append(f"{r.goodput[CEILING]:.1f}")
            row += [f"{r.goodput[p]:.1f}" for p in policies]
            row.append(" / ".join(f"{r.refused[n]:.1f}" for n in refusers))
            out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


def markdown(matrix: Matrix, cells: Sequence[MatrixCell]) -> str:
    return "\n".join(
        (
            summary_markdown(matrix, cells),
            cells_markdown(matrix, cells),
            loads_markdown(matrix, cells),
        )
    )
