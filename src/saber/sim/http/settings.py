"""What one saber-sim server is: the engine it models, its limits, its clock, its faults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from saber.engine import get_preset
from saber.sim.http.lengths import LengthSpec


@dataclass(frozen=True)
class FaultSettings:
    """Faults to inject; all off by default.

    ``error_rate``: share of generation requests answered 500 at once.
    ``stall_prob``: share of generation requests whose response stops after
    ``stall_after`` tokens and then hangs until the client gives up.
    ``refuse_for``: seconds, from start-up, during which connections are refused.
    """

    error_rate: float = 0.0
    stall_prob: float = 0.0
    stall_after: int = 0
    refuse_for: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError("error_rate must be in [0, 1]")
        if not 0.0 <= self.stall_prob <= 1.0:
            raise ValueError("stall_prob must be in [0, 1]")
        if self.stall_after < 0:
            raise ValueError("stall_after must be >= 0")
        if self.refuse_for < 0:
            raise ValueError("refuse_for must be >= 0")


@dataclass(frozen=True)
class SimSettings:
    """Everything a saber-sim app needs; the CLI flags map one to one onto these."""

    preset: str = "paper"
    served_model_name: tuple[str, ...] = ()  # empty: the preset's model name
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    kv_capacity_tokens: int | None = None
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    max_model_len: int = 32768
    time_scale: float = 1.0
    seed: int = 0
    output_len: str = "task"
    fallback_output_len: str = "lognormal:128:0.6"
    faults: FaultSettings = field(default_factory=FaultSettings)
    dev_mode: bool = False  # vLLM's VLLM_SERVER_DEV_MODE=1: GET /server_info is served

    def __post_init__(self) -> None:
        get_preset(self.preset)  # raises UnknownPresetError with the known names
        if isinstance(self.served_model_name, str):
            object.__setattr__(self, "served_model_name", (self.served_model_name,))
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ValueError("scheduling_policy must be 'fcfs' or 'priority'")
        if self.time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        if self.max_model_len < 2:
            raise ValueError("max_model_len must be >= 2")
        LengthSpec.parse(self.output_len)
        if LengthSpec.parse(self.fallback_output_len).kind == "task":
            raise ValueError("fallback_output_len must be fixed:N or lognormal:MEAN:CV")

    @property
    def model_names(self) -> tuple[str, ...]:
        """The names the server answers to; the first is the one it reports."""
        return self.served_model_name or (get_preset(self.preset).model.name,)

    @property
    def model_name(self) -> str:
        return self.model_names[0]
