"""Markdown and JSON renderings of a sweep's rows."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from saber.bench._grid import DEFAULT, DEFAULT_VARIANT
from saber.bench._summary import Row, WorkloadSummary


def _f(x: float, digits: int = 1) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def markdown(rows: Sequence[Row], summaries: Sequence[WorkloadSummary]) -> str:
    # The paper's rule first, then what configs/gateway.yaml ships, the closed loop, the rest.
    variants = sorted(
        {k for r in rows for k in r.variants},
        key=lambda k: (k != "usl", k != DEFAULT, k != DEFAULT_VARIANT, k),
    )
    out = []
    for mode in sorted({r.mode for r in rows}):
        out.append(f"### {mode} mode\n")
        head = ["workload", "RPS", "best B", "best static", "SABER", "diff"]
        head += [v if v == DEFAULT else f"SABER-{v}" for v in variants if v != "usl"]
        head += ["CV SABER", "CV static"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for r in (r for r in rows if r.mode == mode):
            cells = [
                r.workload,
                f"{r.rps:g}",
                str(r.best_static_b),
                _f(r.best_static_goodput),
                _f(r.saber_goodput),
                f"{r.diff:+.1f}",
            ]
            cells += [_f(r.variants[v]) for v in variants if v != "usl"]
            cells += [_f(r.saber_cv, 2), _f(r.static_cv, 2)]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        out.append(
            "| workload | mean diff over the sweep | min diff at RPS >= 5 | diff at max RPS "
            "| CV across RPS, SABER | CV across RPS, best static | best-B counts |"
        )
        out.append("|---|---|---|---|---|---|---|")
        for s in (s for s in summaries if s.mode == mode and s.variant == "usl"):
            counts = ", ".join(f"{b}:{n}" for b, n in s.best_b_counts.items())
            out.append(
                f"| {s.workload} | {s.mean_diff:+.1f} | {s.min_diff_rps_ge_5:+.1f} | "
                f"{s.diff_at_max_rps:+.1f} (RPS {s.max_rps:g}) | {_f(100 * s.saber_cv)}% | "
                f"{_f(100 * s.static_cv)}% | {counts} |"
            )
        out.append("")
        out.extend(_variant_table([s for s in summaries if s.mode == mode], variants))
    return "\n".join(out)


def _variant_table(summaries: Sequence[WorkloadSummary], variants: Sequence[str]) -> list[str]:
    """Every variant against the best static B: mean and worst diff, diff at max RPS, CV."""
    workloads = sorted({s.workload for s in summaries})
    by = {(s.variant, s.workload): s for s in summaries}
    if not any((v, w) in by for v in variants if v != "usl" for w in workloads):
        return []
    slash = "/".join(workloads)
    out = [
        f"SABER variants against the best static B ({slash}):\n",
        f"| variant | mean diff ({slash}) | min diff at RPS >= 5 | diff at max RPS "
        f"| CV across RPS |",
        "|---|---|---|---|---|",
    ]
    for v in variants:
        mine = [by[(v, w)] for w in workloads if (v, w) in by]
        if not mine:
            continue
        out.append(
            f"| {v} | {' / '.join(f'{s.mean_diff:+.1f}' for s in mine)} "
            f"| {' / '.join(f'{s.min_diff_rps_ge_5:+.1f}' for s in mine)} "
            f"| {' / '.join(f'{s.diff_at_max_rps:+.1f}' for s in mine)} "
            f"| {' / '.join(f'{_f(100 * s.saber_cv)}%' for s in mine)} |"
        )
    out.append("")
    return out


def to_json(rows: Sequence[Row]) -> str:
    return dumps([r.to_json() for r in rows])


def dumps(data: Any) -> str:
    """Indented JSON with every nan or infinity as null (JSON has neither)."""
    return json.dumps(_finite(data), indent=2)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj
