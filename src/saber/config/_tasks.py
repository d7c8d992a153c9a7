from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from saber.config._errors import ConfigError
from saber.config._slo import Slo, SloBounds
from saber.config._yaml import read_yaml, validate


def _data_dir(name: str) -> Path:
    """Shipped files: inside the wheel when installed, else the repository's folder."""
    packaged = Path(__file__).resolve().parents[1] / "_data" / name
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[3] / name


DEFAULT_CONFIG_DIR = _data_dir("configs")
DEFAULT_PROFILE_DIR = _data_dir("profiles")

Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]


class TaskType(BaseModel):
    """One kind of request, with the latency its users will tolerate: an SLO in parts
    (``ttft_s``, ``tpot_s``, ``e2e_s``: any of them; met when every part stated is).

    ``sla_s`` and ``sla_kind`` are the SLO's *primary* part, the deadline the scheduler
    races: the whole answer (``e2e``) where ``e2e_s`` is stated, else the first token
    (``ttft``). A task that states only ``tpot_s`` has no deadline (``sla_s`` is
    infinite). Configurations that give ``sla_s`` and ``sla_kind`` (before SLOs had
    parts) are read as before: deprecated, they state the one part they name.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    mean_input_tokens: int = Field(gt=0)
    mean_output_tokens: int = Field(gt=0)
    ttft_s: float | None = Field(default=None, gt=0, description="first token within (s)")
    tpot_s: float | None = Field(
        default=None, gt=0, description="mean time per output token after the first (s)"
    )
    e2e_s: float | None = Field(default=None, gt=0, description="whole answer within (s)")
    sla_s: float = Field(
        gt=0, description="deprecated: the primary part's limit (derived from the parts)"
    )
    sla_kind: Literal["e2e", "ttft"] = Field(
        default="e2e",
        description="deprecated: which part sla_s is, e2e (the paper) or ttft (CATO)",
    )
    slo_bounds: SloBounds | None = Field(
        default=None,
        description="the limits a request may state for itself (x-slo-*-ms headers); "
        "default: each stated part, from the task's own up to 10 times it",
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

    @property
    def slo(self) -> Slo:
        """The SLO in parts. The primary part is read from ``sla_s`` (what a copy with
        another ``sla_s`` changes), the others from their own fields."""
        primary_e2e = self.sla_kind == "e2e" and math.isfinite(self.sla_s)
        return Slo(
            ttft_s=self.sla_s if self.sla_kind == "ttft" else self.ttft_s,
            tpot_s=self.tpot_s,
            e2e_s=self.sla_s if primary_e2e else None,
        )

    @property
    def bounds(self) -> SloBounds:
        """What a request of this task may state for itself."""
        return self.slo_bounds if self.slo_bounds is not None else SloBounds.around(self.slo)

    def with_slo(self, slo: Slo) -> TaskType:
        """This task with another SLO (in parts), its primary part rederived."""
        body = self.model_dump(exclude={"sla_s", "sla_kind", "ttft_s", "tpot_s", "e2e_s"})
        return TaskType(**body, ttft_s=slo.ttft_s, tpot_s=slo.tpot_s, e2e_s=slo.e2e_s)

    @model_validator(mode="before")
    @classmethod
    def _primary(cls, data: Any) -> Any:
        """Derive ``sla_s`` / ``sla_kind`` from the parts, or the part they name from
        them (a configuration of before: they win over that part's own field)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        parts = {p: data.get(f"{p}_s") for p in ("ttft", "tpot", "e2e")}
        sla, kind = data.get("sla_s"), data.get("sla_kind")
        if sla is None:
            if parts["e2e"] is not None:
                derived = (parts["e2e"], "e2e")
            elif parts["ttft"] is not None:
                derived = (parts["ttft"], "ttft")
            elif parts["tpot"] is not None:
                derived = (math.inf, "e2e")
            else:
                raise ValueError("a task states at least one of ttft_s, tpot_s and e2e_s")
            if kind is not None and kind != derived[1]:
                raise ValueError(f"sla_kind {kind!r} names no part this task states")
            data["sla_s"], data["sla_kind"] = derived
            return data
        # sla_s names a part: it is that part's limit (over the part's own field, where a
        # configuration layered on another sets both: the file e2e_s, a flag sla_s).
        kind = kind or "e2e"
        if kind in ("e2e", "ttft"):
            data[f"{kind}_s"] = sla
        if kind == "ttft" and parts["e2e"] is not None:
            raise ValueError("a task that states e2e_s races its whole answer: sla_kind e2e")
        return data

    @model_validator(mode="after")
    def _cap_covers_mean(self) -> TaskType:
        if self.max_tokens < self.mean_output_tokens:
            raise ValueError(
                f"max_tokens ({self.max_tokens}) is below mean_output_tokens "
                f"({self.mean_output_tokens})"
            )
        if self.useful_s is not None and self.useful_s < self.sla_s < math.inf:
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
