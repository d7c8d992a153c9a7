"""What each task type waited at a quarter, half and three quarters of the engine's capacity.

Pure functions of the run's points. A closed loop holds L requests in flight at every
moment, so a level's throughput follows from its points by Little's law: the mean load
times the output tokens its requests made over the time they took. The capacity is the
most any level delivered, in output tokens per second (the engine's work, whatever the mix
of short and long answers that finished in a level); a share of it is the level whose
throughput is nearest, on the rising part of the curve (a level past the peak delivers as
much at worse latency: no operator would run there on purpose).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from saber.config import tpot_of
from saber.profile.points import Point
from saber.speed import LatencyTable, TaskLatency

SHARES = (0.25, 0.5, 0.75)


def level_throughputs(points: Sequence[Point]) -> dict[int, float]:
    """Output tokens per second at each level: mean load x tokens / seconds of its points."""
    out: dict[int, float] = {}
    for level in sorted({p.level for p in points}):
        pts = [p for p in points if p.level == level]
        busy = sum(p.exec_s for p in pts)
        if busy > 0:
            load = sum(p.load for p in pts) / len(pts)
            out[level] = load * sum(p.output_tokens for p in pts) / busy
    return out


def share_level(throughputs: dict[int, float], share: float) -> int:
    """The level whose throughput is nearest ``share`` of the most any level delivered,
    among the levels up to that one (the lower of two as near)."""
    top = max(throughputs, key=lambda level: (throughputs[level], -level))
    rising = [level for level in sorted(throughputs) if level <= top]
    target = share * throughputs[top]
    return min(rising, key=lambda level: (abs(throughputs[level] - target), level))


def latency_table(points: Sequence[Point], shares: Sequence[float] = SHARES) -> LatencyTable:
    """Each task type's TTFT, TPOT and e2e (p50, p90) at the level of each share of the
    capacity. ValueError when no point took any time."""
    throughputs = level_throughputs(points)
    if not throughputs:
        raise ValueError("no measured request to read latencies from")
    top = max(throughputs, key=lambda level: (throughputs[level], -level))
    tasks = sorted({p.task for p in points}, key=lambda t: (t is None, t or ""))
    rows = []
    for task in tasks:
        for share in shares:
            level = share_level(throughputs, share)
            pts = [p for p in points if p.level == level and p.task == task]
            if pts:
                rows.append(task_latency(pts, task, share, level))
    return LatencyTable(
        capacity=throughputs[top], capacity_level=top, throughputs=throughputs, rows=rows
    )


def task_latency(
    points: Sequence[Point], task: str | None, share: float, level: int
) -> TaskLatency:
    """p50 and p90 (numpy's linear interpolation, as vLLM's benchmark reports them) of one
    task's requests at one level."""
    timed = [p for p in points if p.ttft_s is not None]
    ttft = [p.ttft_s for p in timed if p.ttft_s is not None]
    tpot = [tpot_of(p.exec_s, p.ttft_s, p.output_tokens) for p in timed if p.ttft_s is not None]
    ttft_p50, ttft_p90 = _p50_p90(ttft)
    tpot_p50, tpot_p90 = _p50_p90(tpot)
    e2e_p50, e2e_p90 = _p50_p90([p.exec_s for p in points])
    assert e2e_p50 is not None and e2e_p90 is not None
    return TaskLatency(
        task=task,
        share=share,
        level=level,
        points=len(points),
        ttft_p50_s=ttft_p50,
        ttft_p90_s=ttft_p90,
        tpot_p50_s=tpot_p50,
        tpot_p90_s=tpot_p90,
        e2e_p50_s=e2e_p50,
        e2e_p90_s=e2e_p90,
    )


def _p50_p90(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    p50, p90 = np.percentile(np.asarray(values, dtype=float), [50, 90])
    return float(p50), float(p90)
