from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from saber.config._errors import ConfigError
from saber.config._yaml import read_yaml, validate


def _data_dir(name: str) -> Path:
    """Shipped files: inside the wheel when installed, else the repository's folder."""
    packaged = Path(__file__).resolve().parents[1] / "_data" / name
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[3] / name


DEFAULT_CONFIG_DIR = _data_dir("configs")
DEFAULT_PROFILE_DIR = _data_dir("profiles")

Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]


class TaskType(BaseModel):
    """One kind of request, with the latency its users will tolerate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    mean_input_tokens: int = Field(gt=0)
    mean_output_tokens: int = Field(gt=0)
    sla_s: float = Field(gt=0, description="the latency SLA in seconds (see sla_kind)")
    sla_kind: Literal["e2e", "ttft"] = Field(
        default="e2e",
        description="e2e: the whole answer within sla_s (the paper); ttft: its first token "
        "(CATO: what a person typing waits for)",
    )
    max_tokens: int = Field(gt=0, description="the cap a client sends in realistic mode")
    expected_output_tokens: int | None = Field(
        default=None, gt=0, description="assumed output length; defaults to the mean"
    )
    useful_s: float | None = Field(
        default=None,
        gt=0,
        description="how long after arrival an answer is still wanted; a waiting request "
        "that can no longer finish by then is rejected. None: wanted however late",
    )

    @property
    def expected_tokens(self) -> int:
        return self.expected_output_tokens or self.mean_output_tokens

    @model_validator(mode="after")
    def _cap_covers_mean(self) -> TaskType:
        if self.max_tokens < self.mean_output_tokens:
            raise ValueError(
                f"max_tokens ({self.max_tokens}) is below mean_output_tokens "
                f"({self.mean_output_tokens})"
            )
        if self.useful_s is not None and self.useful_s < self.sla_s:
            raise ValueError(f"useful_s ({self.useful_s}) is below sla_s ({self.sla_s})")
        return self


class _TaskFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tasks: dict[Name, dict] = Field(min_length=1)


class Workload(BaseModel):
    """A task mix: the share of arrivals of each task type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    mix: dict[Name, Annotated[float, Field(ge=0)]] = Field(min_length=1)

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> Workload:
        total = sum(self.mix.values())
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"mix weights sum to {total:g}, expected 1")
        return self


class _WorkloadFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workloads: dict[str, dict] = Field(min_length=1)


def parse_tasks(data: object, source: str | Path) -> dict[str, TaskType]:
    """Validate a ``tasks:`` mapping (already parsed YAML) into task types by name."""
    raw = validate(_TaskFile, data, source)
    return {
        name: validate(TaskType, {"name": name, **(body or {})}, f"{source}: tasks.{name}")
        for name, body in raw.tasks.items()
    }


def load_tasks(path: str | Path = DEFAULT_CONFIG_DIR / "tasks.yaml") -> dict[str, TaskType]:
    return parse_tasks(read_yaml(path), path)


def load_workloads(
    path: str | Path = DEFAULT_CONFIG_DIR / "workloads.yaml",
    tasks: dict[str, TaskType] | None = None,
) -> dict[str, Workload]:
    """Load the workload mixes; with ``tasks``, every task a mix names must exist."""
    raw = validate(_WorkloadFile, read_yaml(path), path)
    out: dict[str, Workload] = {}
    for name, body in raw.workloads.items():
        wl = validate(Workload, {"name": name, **(body or {})}, f"{path}: workloads.{name}")
        if tasks is not None:
            unknown = sorted(set(wl.mix) - set(tasks))
            if unknown:
                raise ConfigError(
                    f"{path}: invalid configuration\n  workloads.{name}.mix: "
                    f"unknown task type(s) {', '.join(unknown)}; known: {', '.join(sorted(tasks))}"
                )
        out[name] = wl
    return out
