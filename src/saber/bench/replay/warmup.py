"""What a scheduler has learned, carried from one window to the next, as a gateway
restarted from its state file carries it (``saber.gateway.control.learning``): each
task's answer lengths and their conditionings, the prompts' bytes per token, the speed
model a refit swapped in (if any) and the calibration. The refit's window of points is
not carried: a restarted gateway starts it empty too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from saber.scheduler import Scheduler
from saber.speed import SpeedModel


@dataclass(frozen=True)
class Learned:
    lengths: dict[str, Any]
    prompts: dict[str, float]
    live_model: SpeedModel | None  # None: the profile's still
    calibration: float


def learned(sched: Scheduler, profile: SpeedModel) -> Learned:
    """What ``sched`` has learned; ``profile`` is the speed model it started on."""
    model = sched.speed_model
    live = model if isinstance(model, SpeedModel) and model is not profile else None
    return Learned(sched.lengths.state(), sched.lengths.prompts.state(), live, sched.calibration)


def restore(sched: Scheduler, state: Learned) -> None:
    """Start ``sched`` (new, of the same policy) from ``state``."""
    sched.lengths.restore(state.lengths)
    sched.lengths.prompts.restore(state.prompts)
    if state.live_model is not None:
        sched.set_speed_model(state.live_model)  # restarts the calibration: set it after
    if sched.policy.calibrate:
        sched.set_calibration(state.calibration)
