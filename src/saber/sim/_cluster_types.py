"""What the pool simulator drives (an admission pool, or several: gateways) and what
it reports of a run (``ClusterResult``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from saber.scheduler import Decision, SchedRequest, TaskLengths
from saber.sim._records import SimResult


class Placed(Protocol):
    """A pool's decision and the replica it concerns (where an admitted request runs)."""

    @property
    def decision(self) -> Decision: ...
    @property
    def backend(self) -> int: ...


class AdmissionPool(Protocol):
    """Admission and placement over the replicas, driven like one scheduler: the part of
    ``saber.scheduler.Pool`` the simulator drives."""

    lengths: TaskLengths

    def offer(self, req: SchedRequest, now: float) -> Sequence[Placed]: ...
    def poll(self, now: float) -> Sequence[Placed]: ...
    def progress(self, req_id: str, tokens: int, now: float) -> None: ...
    def finish(
        self, req_id: str, now: float, tokens: int | None = None, prompt_tokens: int | None = None
    ) -> object: ...
    def next_wakeup(self) -> float | None: ...
    def set_elsewhere(self, backend: int, seen: int, headroom: int, now: float) -> None: ...
    def set_first_token_wait(self, backend: int, seconds: float) -> None: ...
    def set_budget(self, most: int | None, window_s: float = 0.0) -> None: ...


@dataclass(frozen=True, slots=True)
class BackendStats:
    """What one replica did: requests handed to it and finished there, the most it ran
    at once, its preemptions and steps, and the most requests it held (running +
    waiting) at the start of a step."""

    index: int
    preset: str
    served: int
    finished: int
    max_running: int
    preemptions: int
    steps: int
    max_in_engine: int = 0


@dataclass(frozen=True, slots=True)
class GatewayStats:
    """One gateway's run: requests hashed to it, its scrapes, and per replica how often
    its view (its own requests there + what it saw at its last scrape + the headroom)
    was below the engine's count at the start of a step, and by how many at most (the
    unseen overload)."""

    index: int
    offered: int
    scrapes: int
    unseen_steps: tuple[int, ...]
    max_unseen: tuple[int, ...]


@dataclass(slots=True)
class ClusterResult(SimResult):
    """A pool's run: a ``SimResult`` over every replica (so the bench scores it as one
    run), where each request was served, and each replica's counts.

    ``steps``, ``engine_calls`` and ``preemptions`` are summed over the replicas,
    ``max_running`` is the most any one replica ran at once, and ``end`` is when the
    last step of any replica ended. ``gateways``: each admission pool's counts (one for
    ``pool``, none behind a router).
    """

    served_by: dict[str, int] = field(default_factory=dict)  # request id -> replica
    backends: list[BackendStats] = field(default_factory=list)
    gateways: list[GatewayStats] = field(default_factory=list)
