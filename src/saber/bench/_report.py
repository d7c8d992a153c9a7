"""Markdown and JSON renderings of a sweep's rows."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from saber.bench._summary import Row, WorkloadSummary


def _f(x: float, digits: int = 1) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def markdown(rows: Sequence[Row], summaries: Sequence[WorkloadSummary]) -> str:
    variants = sorted({k for r in rows for k in r.variants}, key=lambda k: (k != "usl", k))
    out = []
    for mode in sorted({r.mode for r in rows}):
        out.append(f"### {mode} mode\n")
        head = ["workload", "RPS", "best B", "best static", "SABER", "diff"]
        head += [f"SABER-{v}" for v in variants if v != "usl"]
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
        for s in (s for s in summaries if s.mode == mode):
            counts = ", ".join(f"{b}:{n}" for b, n in s.best_b_counts.items())
            out.append(
                f"| {s.workload} | {s.mean_diff:+.1f} | {s.min_diff_rps_ge_5:+.1f} | "
                f"{s.diff_at_max_rps:+.1f} (RPS {s.max_rps:g}) | {_f(100 * s.saber_cv)}% | "
                f"{_f(100 * s.static_cv)}% | {counts} |"
            )
        out.append("")
    return "\n".join(out)


def to_json(rows: Sequence[Row]) -> str:
    def clean(obj):
        if isinstance(obj, float) and not math.isfinite(obj):
            return None
        if isinstance(obj, dict):
            return {k: clean(v) for k, v in obj.items()}
        return obj

    return json.dumps([clean(r.to_json()) for r in rows], indent=2)
