"""Suggested SLOs from saber-profile's latency table: a pure rule, and its YAML.

The rule: each part (TTFT, TPOT, e2e) twice its p90 at three quarters of the capacity,
rounded up to 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 x 10^k seconds. Why: the gateway is
worth its place when the engine can be kept busy, so a limit should hold where the
engine does most of its work yet still has room; at three quarters of its capacity the
engine meets its own p90 for nine requests in ten, and twice that leaves room for the
latencies to grow as admission runs it nearer its capacity (TPOT and e2e grow about as
1/f(L), TTFT faster, as requests queue for their prefill). A limit set at the idle
engine's latency would make the gateway keep it near idle; one set past what the engine
gives at capacity would never bind, and overload would go unnoticed. The rounding gives
limits a person can read and state (at most a third more).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import yaml

from saber.config import Slo
from saber.profile.points import Point
from saber.speed import LatencyTable, TaskLatency

SHARE = 0.75
"""The share of the capacity the limits are read at."""
MARGIN = 2.0
"""Each limit is this times the part's p90 at ``SHARE``, before rounding up."""
STEPS = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)
"""Limits are one of these times a power of ten (seconds)."""
UNNAMED = "unnamed"
"""The name suggestions give the requests of a dataset that named no task."""


def round_up(seconds: float) -> float:
    """The smallest ``STEPS`` x 10^k at or above ``seconds`` (> 0)."""
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"a limit must be a positive number of seconds, got {seconds}")
    exponent = math.floor(math.log10(seconds))
    for k in (exponent - 1, exponent, exponent + 1):
        for step in STEPS:
            value = float(f"{step:g}e{k}")  # the decimal, not step * 10**k (0.30000000000000004)
            if value >= seconds * (1 - 1e-12):
                return value
    raise AssertionError("unreachable: 10^(exponent + 1) exceeds seconds")


def suggest_slos(
    table: LatencyTable, *, share: float = SHARE, margin: float = MARGIN
) -> dict[str, Slo]:
    """Each task type's suggested SLO, from its row at ``share`` of the capacity: every part
    measured, ``margin`` times its p90, rounded up (``round_up``). A task without a row at
    that share (no request of it finished at that level) gets none; a TPOT of 0 (answers
    of one token) is no limit."""
    out: dict[str, Slo] = {}
    for row in table.rows:
        if row.share != share:
            continue
        parts = {
            "ttft_s": row.ttft_p90_s,
            "tpot_s": row.tpot_p90_s,
            "e2e_s": row.e2e_p90_s,
        }
        out[row.task or UNNAMED] = Slo(
            **{part: round_up(margin * p90) for part, p90 in parts.items() if p90}
        )
    return out


def basis(table: LatencyTable, share: float = SHARE) -> TaskLatency | None:
    """A row the suggestions were read from (they share its level), if any."""
    return next((row for row in table.rows if row.share == share), None)


def met_shares(
    points: Sequence[Point], slos: Mapping[str, Slo], levels: Sequence[int]
) -> dict[str, dict[int, float | None]]:
    """Per task, the share of its requests at each of ``levels`` that met every part of its
    suggested SLO (vLLM's goodput rule); None where none of them ran at that level."""
    out: dict[str, dict[int, float | None]] = {}
    for task, slo in slos.items():
        out[task] = {}
        for level in levels:
            pts = [p for p in points if p.level == level and (p.task or UNNAMED) == task]
            met = [
                slo.meets(ttft=p.ttft_s, e2e=p.exec_s, output_tokens=p.output_tokens) for p in pts
            ]
            out[task][level] = sum(met) / len(met) if met else None
    return out


def slos_yaml(slos: Mapping[str, Slo], comments: Sequence[str] = ()) -> str:
    """The suggestions as YAML, ``tasks:`` then one line per task (``comments`` first)."""
    tasks = {
        task: {f"{part}_s": slo.limit(part) for part in slo.parts} for task, slo in slos.items()
    }
    body = yaml.safe_dump({"tasks": tasks}, sort_keys=False, default_flow_style=None)
    return "".join(f"# {line}\n" for line in comments) + body
