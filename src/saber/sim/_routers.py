"""Routers: what spreads requests over a pool of replicas when nothing admits them.

A router picks a replica for each request the moment it arrives ("vLLM alone behind
a router"), from a snapshot of every replica's load. These are the baselines a pool
of SABER gateways is measured against: what the field runs in front of several vLLM
replicas today.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class BackendView:
    """One replica as a router sees it when a request arrives.

    ``outstanding`` is what was sent there and has not finished (running plus
    waiting); ``running`` and ``waiting`` are the engine's batch and queue (vLLM's
    ``num_requests_running`` / ``num_requests_waiting``), ``kv_usage`` its share of
    KV-cache blocks in use, 0..1 (``kv_cache_usage_perc``).
    """

    index: int
    outstanding: int
    running: int
    waiting: int
    kv_usage: float


class Router(Protocol):
    """Picks the index of the replica that serves the next request; may keep state."""

    name: str

    def pick(self, backends: Sequence[BackendView]) -> int: ...


class RoundRobin:
    """Each replica in turn, whatever its load: a plain Kubernetes Service or nginx."""

    name = "round-robin"

    def __init__(self) -> None:
        self._cursor = 0

    def pick(self, backends: Sequence[BackendView]) -> int:
        index = backends[self._cursor % len(backends)].index
        self._cursor += 1
        return index


class LeastOutstanding:
    """The replica with the fewest requests in flight, ties to the lowest index: Envoy's
    and most proxies' least-request balancing, with a perfect count."""

    name = "least-outstanding"

    def pick(self, backends: Sequence[BackendView]) -> int:
        return min(backends, key=lambda b: (b.outstanding, b.index)).index


class QueueKV:
    """Short queue and free KV cache first, in the style of the Gateway API Inference
    Extension's endpoint picker (EPP).

    Each replica's cost is ``(waiting - min_waiting) / (max_waiting - min_waiting)``
    (0 for all when every queue is as long) plus ``kv_usage``; the lowest cost wins,
    ties to fewer outstanding requests, then the lowest index. This is the EPP's
    default ``queue-scorer`` (``(max - q) / (max - min)``, 1 when all are equal) plus
    its ``kv-cache-utilization-scorer`` (``1 - kv``) at equal weights, negated: the
    same order, in spirit, not its code. Unlike the EPP, which scrapes each replica's
    metrics every few tens of milliseconds and picks at random among ties, it sees
    the engines' state of the moment and breaks ties by rule. The EPP's prefix-cache
    scorer has nothing to score here: the engine model holds no prefix cache.
    """

    name = "queue-kv"

    def pick(self, backends: Sequence[BackendView]) -> int:
        low = min(b.waiting for b in backends)
        spread = max(b.waiting for b in backends) - low

        def cost(b: BackendView) -> tuple[float, int, int]:
            queue = (b.waiting - low) / spread if spread else 0.0
            return queue + b.kv_usage, b.outstanding, b.index

        return min(backends, key=cost).index


ROUTERS: dict[str, Callable[[], Router]] = {
    RoundRobin.name: RoundRobin,
    LeastOutstanding.name: LeastOutstanding,
    QueueKV.name: QueueKV,
}
"""Each router by name; call the entry for a fresh one (a router may hold state)."""
