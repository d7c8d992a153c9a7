"""Profile files: a fitted speed model with the evidence behind it, as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pydantic
from numpy.typing import ArrayLike
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, FiniteFloat, field_validator
from pydantic_core import PydanticCustomError
from pydantic_core.core_schema import ValidationInfo

from saber.speed._base import SpeedModel
from saber.speed._data import as_points, group_levels
from saber.speed._errors import ParamError, ProfileError
from saber.speed._metrics import mape, r2_score
from saber.speed._registry import MODELS, model_class

_MAX_SUMMARY_LEVELS = 64
Count = Annotated[int, Field(ge=0)]
Load = Annotated[FiniteFloat, Field(ge=1.0)]
Speed = Annotated[FiniteFloat, Field(ge=0.0)]
NonNegative = Annotated[FiniteFloat, Field(ge=0.0)]


class LevelSummary(BaseModel):
    """Speeds measured around one load level."""

    model_config = ConfigDict(extra="forbid")

    load: Load
    n: Annotated[int, Field(ge=1)]
    mean_speed: Speed
    p10: Speed
    p90: Speed


class PointsSummary(BaseModel):
    """What the fit was made from: point count, load range and per-level speeds."""

    model_config = ConfigDict(extra="forbid")

    count: Count
    load_min: Load
    load_max: Load
    levels: list[LevelSummary]


class ProfiledBackend(BaseModel):
    """The serving engine that was profiled."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1, description='"vllm", "llamacpp", "sim", ...')
    url: str | None = None
    version: str | None = None


class ModelInfo(BaseModel):
    """The served LLM; fields beyond `name` (quantisation, GPU, ...) are kept as given."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)


class TTFTFit(BaseModel):
    """Time to first token (s) against prompt length P and load L, fitted by saber-profile.

    ttft(P, L) = intercept_s + per_prompt_token_s*P + per_load_s*(L-1)
                 + per_prompt_token_load_s*P*(L-1)

    Prefill cost grows with the prompt, and every step it shares with L-1 running
    requests is longer, so all four coefficients are >= 0. `predict` extrapolates
    linearly beyond the profiled ranges (`prompt_tokens_max`, `load_max`).
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["linear"] = "linear"
    intercept_s: NonNegative
    per_prompt_token_s: NonNegative
    per_load_s: NonNegative
    per_prompt_token_load_s: NonNegative
    r2: FiniteFloat = Field(le=1.0)
    mape: FiniteFloat = Field(ge=0.0)
    n: Annotated[int, Field(ge=1)]
    prompt_tokens_max: Annotated[int, Field(ge=1)]
    load_max: Load
    # The prefill of an idle engine: seconds per prompt token (the slope of TTFT against
    # the prompt at the profile's lowest load), and the profile's requests' prompt tokens
    # per generated token (f(L), a speed over each request's whole time, counts that much
    # prefill per token: ``Scheduler``'s prefill beyond it). None: not measured.
    prefill_s_per_token: NonNegative | None = None
    prompt_per_output: NonNegative | None = None

    @property
    def prefill(self) -> tuple[float, float] | None:
        """(seconds per prompt token, prompt tokens per generated token), if measured."""
        if self.prefill_s_per_token is None or self.prompt_per_output is None:
            return None
        return self.prefill_s_per_token, self.prompt_per_output

    def predict(self, prompt_tokens: float, load: float) -> float:
        """Predicted TTFT in seconds; loads below 1 count as 1."""
        extra = max(load, 1.0) - 1.0
        return (
            self.intercept_s
            + self.per_prompt_token_s * prompt_tokens
            + (self.per_load_s + self.per_prompt_token_load_s * prompt_tokens) * extra
        )


class FitScore(BaseModel):
    """One speed model's fit during profiling, scored on held-out load levels.

    `level_error` ranks the models (`saber.speed.select_model`): the mean relative error
    of the curve at the levels' mean speeds, each level predicted by a fit without it
    where it can be. `r2` and `mape` are over the held-out requests; `level_r2` over the
    held-out levels' mean speeds, which leaves out the spread between requests at one
    load; `in_sample_r2` over every point, of the model refitted on all of them.
    """

    model_config = ConfigDict(extra="forbid")

    kind: str
    params: dict[str, FiniteFloat]
    level_error: FiniteFloat | None = Field(default=None, ge=0.0)
    r2: FiniteFloat = Field(le=1.0)
    mape: FiniteFloat = Field(ge=0.0)
    level_r2: FiniteFloat | None = Field(default=None, le=1.0)
    in_sample_r2: FiniteFloat | None = Field(default=None, le=1.0)


class TaskLatency(BaseModel):
    """One task type's latencies at one load level (seconds, p50 and p90 of its requests):
    what saber-profile measured, for choosing SLOs. TPOT is vLLM's, (e2e - TTFT) /
    (tokens - 1); TTFT and TPOT are None when the backend streamed no first token."""

    model_config = ConfigDict(extra="allow")

    task: str | None = Field(
        default=None, description="None: requests that named no task (a dataset's)"
    )
    share: FiniteFloat = Field(gt=0.0, le=1.0, description="of the capacity, as asked")
    level: Annotated[int, Field(ge=1)]
    points: Annotated[int, Field(ge=1)]
    ttft_p50_s: NonNegative | None = None
    ttft_p90_s: NonNegative | None = None
    tpot_p50_s: NonNegative | None = None
    tpot_p90_s: NonNegative | None = None
    e2e_p50_s: NonNegative
    e2e_p90_s: NonNegative


class LatencyTable(BaseModel):
    """The latencies each task type had at shares of the engine's capacity: the most output
    tokens per second any level delivered. A share's level is the one on the rising part
    of the throughput curve (up to the capacity's level) whose throughput is nearest it."""

    model_config = ConfigDict(extra="allow")

    unit: Literal["output tokens/s"] = "output tokens/s"
    capacity: Speed
    capacity_level: Annotated[int, Field(ge=1)]
    throughputs: dict[int, Speed] = Field(description="each level's, in unit")
    rows: list[TaskLatency] = []


class ProfilingInfo(BaseModel):
    """How saber-profile measured the points: provenance for whoever reads the file.

    Nothing in the gateway depends on it; unknown fields are kept so newer
    profilers can add to it without breaking older readers.
    """

    model_config = ConfigDict(extra="allow")

    tool: str = "saber-profile"
    source: str = Field(description='"workload W3" or "dataset FILE"')
    endpoint: str
    levels: list[Annotated[int, Field(ge=1)]]
    held_out_levels: list[Annotated[int, Field(ge=1)]] = []
    cross_validated: bool = False
    scoring: str | None = Field(default=None, description="how the fits' R^2 were scored")
    requests_per_level: Annotated[int, Field(ge=1)]
    rounds: Annotated[int, Field(ge=1)] = 1
    remeasured_levels: list[Annotated[int, Field(ge=1)]] = []
    """Levels whose rounds disagreed (something else slowed the backend) and were visited
    again."""
    warmup: str
    lengths: Literal["forced", "observed"] = "forced"
    saturated_at: Annotated[int, Field(ge=1)] | None = None
    max_running: Count | None = None
    fits: list[FitScore] = []
    latencies: LatencyTable | None = None
    """TTFT, TPOT and e2e per task type at shares of the capacity (saber-profile's table)."""


class Profile(BaseModel):
    """A speed profile file. `speed_model()` gives the f(L) it describes."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    kind: str
    params: dict[str, FiniteFloat]
    r2: FiniteFloat = Field(le=1.0)
    mape: FiniteFloat = Field(ge=0.0)
    points: PointsSummary
    samples: list[tuple[Load, Speed]] | None = None
    backend: ProfiledBackend
    model: ModelInfo
    created_at: AwareDatetime
    ttft_fit: TTFTFit | None = None
    profiling: ProfilingInfo | None = None
    notes: str | None = None

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind not in MODELS:
            known = ", ".join(MODELS)
            raise PydanticCustomError(
                "speed_kind",
                "unknown speed model kind '{kind}' (expected one of {known})",
                {"kind": kind, "known": known},
            )
        return kind

    @field_validator("params")
    @classmethod
    def _params_fit_kind(cls, params: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        kind = info.data.get("kind")
        if kind is None:  # the kind itself was invalid and is reported on its own
            return params
        try:
            MODELS[kind].from_params(**params)
        except ParamError as exc:
            raise PydanticCustomError(
                "speed_param", "{param}: {reason}", {"param": exc.param, "reason": exc.reason}
            ) from None
        return params

    def speed_model(self) -> SpeedModel:
        return model_class(self.kind).from_params(**self.params)


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile; ProfileError names the file and what is wrong."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ProfileError(f"{path}: cannot read profile: {reason}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(
            f"{path}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a JSON object, got {type(data).__name__}")
    try:
        return Profile.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ProfileError(_describe(path, exc)) from None


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write the profile as indented JSON, creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile.model_dump_json(indent=2, exclude_none=True) + "\n", encoding="utf-8")


def build_profile(
    model: SpeedModel,
    loads: ArrayLike,
    speeds: ArrayLike,
    *,
    backend: ProfiledBackend | Mapping[str, Any] | str,
    model_name: str,
    notes: str | None = None,
    keep_samples: bool = True,
) -> Profile:
    """A profile for a fitted model, scored (R^2, MAPE) and summarised on the given points.

    `backend` is a ProfiledBackend, a mapping of its fields, or just its kind ("vllm").
    """
    x, y = as_points(loads, speeds)
    if isinstance(backend, str):
        backend = ProfiledBackend(kind=backend)
    elif not isinstance(backend, ProfiledBackend):
        backend = ProfiledBackend.model_validate(dict(backend))
    return Profile(
        kind=model.kind,
        params=model.params,
        r2=r2_score(model, x, y),
        mape=mape(model, x, y),
        points=summarize_points(x, y),
        samples=list(zip(x.tolist(), y.tolist(), strict=True)) if keep_samples else None,
        backend=backend,
        model=ModelInfo(name=model_name),
        created_at=datetime.now(UTC),
        notes=notes,
    )


def summarize_points(loads: ArrayLike, speeds: ArrayLike) -> PointsSummary:
    """Per-level rows; past 64 distinct loads, 64 equal-count load bins (load = bin mean)."""
    x, y = as_points(loads, speeds)
    rows = []
    for group in group_levels(x, max_groups=_MAX_SUMMARY_LEVELS):
        level = y[group]
        p10, p90 = np.percentile(level, [10, 90])
        rows.append(
            LevelSummary(
                load=float(x[group].mean()),
                n=int(group.size),
                mean_speed=float(level.mean()),
                p10=float(p10),
                p90=float(p90),
            )
        )
    return PointsSummary(
        count=int(x.size), load_min=float(x.min()), load_max=float(x.max()), levels=rows
    )


def _describe(path: Path, exc: pydantic.ValidationError) -> str:
    lines = [f"{path}: invalid speed profile"]
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        message = err["msg"]
        if err["type"] == "speed_param":
            loc.append(str(err["ctx"]["param"]))
            message = str(err["ctx"]["reason"])
        lines.append(f"  {'.'.join(loc) or '(top level)'}: {message}")
    return "\n".join(lines)
