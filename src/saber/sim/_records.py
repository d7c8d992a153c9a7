"""What a simulated run reports: one record per trace request, and run totals."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from saber.config import Slo, TaskType, tpot_of


@dataclass(frozen=True, slots=True)
class SimRecord:
    """The fate of one trace request.

    ``admitted_at`` is when it was handed to the engine (its arrival in a static
    run, the scheduler's ADMIT otherwise); ``started_at`` when the engine first
    computed it. A rejected request was never served; a request that is neither
    finished nor rejected was still queued when the run ended. Only a finished
    request within its task's SLA (inclusive) meets it: end to end, or for a task
    with a TTFT SLA, its first token.
    """

    id: str
    task: str
    arrival: float
    sla_s: float
    admitted_at: float | None
    started_at: float | None
    first_token_at: float | None
    finished_at: float | None
    output_tokens: int  # tokens generated
    preemptions: int
    demoted: bool
    rejected: bool
    sla_kind: str = "e2e"
    # Its SLO in parts, where it has one (its task's, each part its own replaced): met
    # when every stated part is (vLLM's goodput rule). None: ``sla_s`` / ``sla_kind``.
    slo: Slo | None = None

    @property
    def e2e(self) -> float | None:
        """End-to-end latency: arrival to last token."""
        return None if self.finished_at is None else self.finished_at - self.arrival

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.arrival

    @property
    def met_sla(self) -> bool:
        if self.finished_at is None:
            return False
        if self.slo is not None:
            return self.slo.meets(ttft=self.ttft, e2e=self.e2e, output_tokens=self.output_tokens)
        latency = self.ttft if self.sla_kind == "ttft" else self.e2e
        return latency is not None and latency <= self.sla_s

    @property
    def tpot(self) -> float | None:
        """vLLM's time per output token after the first; None unfinished."""
        if self.e2e is None:
            return None
        return tpot_of(
            self.e2e, self.ttft if self.ttft is not None else self.e2e, self.output_tokens
        )


@dataclass(slots=True)
class SimResult:
    """A run: its records in trace order, and engine totals."""

    records: list[SimRecord]
    steps: int = 0
    engine_calls: int = 0
    preemptions: int = 0
    max_running: int = 0
    end: float = 0.0  # when the last step ended
    unfinished: list[str] = field(default_factory=list)
    swaps: list[float] = field(default_factory=list)  # when a refit replaced f(L)

    def goodput(self, task: str | None = None) -> float:
        """Share of requests (of ``task``, if given) that met their SLA; 0..1."""
        recs = self._of(task)
        return sum(r.met_sla for r in recs) / len(recs) if recs else 0.0

    def mean_e2e(self, task: str | None = None) -> float:
        """Mean end-to-end latency of the finished requests (nan if none)."""
        done = [r.e2e for r in self._of(task) if r.e2e is not None]
        return statistics.fmean(done) if done else float("nan")

    def tasks(self) -> list[str]:
        return sorted({r.task for r in self.records})

    def _of(self, task: str | None) -> list[SimRecord]:
        return self.records if task is None else [r for r in self.records if r.task == task]


def judged_by(task: TaskType, own: Slo | None = None) -> Slo | None:
    """The SLO a record of ``task`` is judged by, with a request's ``own`` parts: None
    where the task's primary part alone decides (``sla_s`` / ``sla_kind``, as the
    paper's experiment judges)."""
    if own is not None and own.parts:
        return task.slo.merged(own)
    return task.slo if len(task.slo.parts) > 1 or math.isinf(task.sla_s) else None
