"""Which SLAs the profiled backend can meet, judged as the gateway will judge them.

The gateway predicts a request's latency at load L as expected tokens / f(L),
where f is the fitted speed, tokens over the whole request time (TTFT included,
so it is not added again). A task type whose required speed, expected tokens /
SLA, is above f(1) can never meet its SLA: the gateway demotes such a request to
best effort the moment it arrives. Otherwise the highest L with f(L) at or above
the required speed is the most load at which the task can still meet it; it is
searched only up to the highest profiled level, since f is not known beyond.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from saber.config import TaskType
from saber.speed import SpeedModel, TTFTFit


@dataclass(frozen=True)
class Feasibility:
    """One task type against the profile.

    ``max_load`` is None when the SLA can never be met; ``max_load ==
    profiled_max`` means it is still met at the highest profiled level.
    """

    task: str
    expected_tokens: int
    sla_s: float
    required_speed: float
    best_latency_s: float
    ttft_s: float | None
    max_load: int | None
    profiled_max: int

    @property
    def feasible(self) -> bool:
        return self.max_load is not None


def feasibility(
    speed: SpeedModel,
    tasks: Mapping[str, TaskType],
    *,
    profiled_max: int,
    ttft: TTFTFit | None = None,
) -> list[Feasibility]:
    """Each task type's best latency and the highest load at which it meets its SLA."""
    rows = []
    for name, task in sorted(tasks.items()):
        tokens = task.expected_tokens
        required = tokens / task.sla_s
        max_load = None
        for load in range(1, max(profiled_max, 1) + 1):
            if speed.predict(float(load)) >= required:
                max_load = load
        rows.append(
            Feasibility(
                task=name,
                expected_tokens=tokens,
                sla_s=task.sla_s,
                required_speed=required,
                best_latency_s=tokens / speed.predict(1.0),
                ttft_s=None if ttft is None else ttft.predict(task.mean_input_tokens, 1.0),
                max_load=max_load,
                profiled_max=profiled_max,
            )
        )
    return rows
