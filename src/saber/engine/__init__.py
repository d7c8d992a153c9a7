"""A model of a vLLM-like continuous-batching engine, stepped by its caller.

``Engine`` schedules and times steps; an ``EnginePreset`` (accelerator x model x
efficiency factors) turns a batch into a step time. Nothing here knows about the
clock, the scheduler or HTTP.
"""

from saber.engine._engine import Engine, SchedulingPolicy
from saber.engine._preset import BLOCK_SIZE, EnginePreset
from saber.engine._presets import PAPER, PRESETS, UnknownPresetError, get_preset
from saber.engine._request import EngineRequest, StepResult
from saber.engine._specs import HARDWARE, MODELS, Hardware, ModelSpec

__all__ = [
    "BLOCK_SIZE",
    "HARDWARE",
    "MODELS",
    "PAPER",
    "PRESETS",
    "Engine",
    "EnginePreset",
    "EngineRequest",
    "Hardware",
    "ModelSpec",
    "SchedulingPolicy",
    "StepResult",
    "UnknownPresetError",
    "get_preset",
]
