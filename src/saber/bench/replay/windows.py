"""A trace cut into windows of consecutive requests, each replayed at a chosen rate.

A window keeps its requests' order and the spacing between their arrivals: shifted to
start at 0, and stretched or compressed as a whole so that its mean rate, (requests -
1) / (last arrival - first), is the rate asked for. Bursts stay bursts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from saber.workload import TraceRequest


def mean_rate(requests: Sequence[TraceRequest]) -> float:
    """Requests per second from the first arrival to the last: the gaps over the time."""
    span = requests[-1].arrival - requests[0].arrival if requests else 0.0
    if len(requests) < 2 or span <= 0:
        raise ValueError("a rate needs at least two requests that do not all arrive at once")
    return (len(requests) - 1) / span


def window_starts(total: int, windows: int, size: int, start: int | None = None) -> list[int]:
    """The first request of each of ``windows`` + 1 windows of ``size`` (the first only
    warms the gateway up): consecutive from ``start``, else spread evenly over the
    ``total`` requests, the first at the start and the last at the end."""
    if windows < 1 or size < 2:
        raise ValueError("need at least one window of at least two requests")
    first = 0 if start is None else start
    needed = first + (windows + 1) * size
    if first < 0 or needed > total:
        where = "" if start is None else f" from request {start}"
        raise ValueError(
            f"{windows} windows of {size} requests and one to warm up need {needed - first} "
            f"requests{where}; the trace has {total}"
        )
    if start is not None:
        return [start + k * size for k in range(windows + 1)]
    return [round(k * (total - size) / windows) for k in range(windows + 1)]


def scaled(window: Sequence[TraceRequest], rate: float) -> list[TraceRequest]:
    """``window`` (in arrival order) shifted to start at 0, its spacing scaled so that
    its mean rate is ``rate`` requests per second."""
    if not rate > 0:
        raise ValueError(f"a rate must be > 0, got {rate}")
    factor = mean_rate(window) / rate
    t0 = window[0].arrival
    return [dataclasses.replace(r, arrival=(r.arrival - t0) * factor) for r in window]
