"""Service-level objectives in parts, as people state them and as vLLM's benchmark counts
goodput: time to first token (TTFT), time per output token after the first (TPOT), and
the whole answer's latency (e2e). A request meets its SLO when it meets every part
stated; a part not stated is no limit.

TPOT is vLLM's: (e2e - TTFT) / (output tokens - 1), and 0 for an answer of at most one
token (``benchmark_serving``'s rule, which goodput follows).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Part = Literal["ttft", "tpot", "e2e"]
PARTS: tuple[Part, ...] = ("ttft", "tpot", "e2e")


def tpot_of(e2e: float, ttft: float, output_tokens: int) -> float:
    """vLLM's time per output token after the first (0 for one token or none)."""
    if output_tokens <= 1:
        return 0.0
    return (e2e - ttft) / (output_tokens - 1)


class Slo(BaseModel):
    """Limits in seconds on each part; None: that part is not stated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_s: float | None = Field(default=None, gt=0)
    tpot_s: float | None = Field(default=None, gt=0)
    e2e_s: float | None = Field(default=None, gt=0)

    def limit(self, part: Part) -> float | None:
        value: float | None = getattr(self, f"{part}_s")
        return value

    @property
    def parts(self) -> tuple[Part, ...]:
        """The parts stated, in PARTS order."""
        return tuple(p for p in PARTS if self.limit(p) is not None)

    def met(self, *, ttft: float | None, e2e: float | None, output_tokens: int) -> dict[Part, bool]:
        """Each stated part, met or not, by an answer that finished (``e2e``) with its
        first token at ``ttft`` (None: it never made one)."""
        out: dict[Part, bool] = {}
        for part in self.parts:
            limit = self.limit(part)
            assert limit is not None
            if e2e is None:
                out[part] = False
            elif part == "e2e":
                out[part] = e2e <= limit
            elif part == "ttft":
                out[part] = ttft is not None and ttft <= limit
            else:
                first = ttft if ttft is not None else e2e
                out[part] = tpot_of(e2e, first, output_tokens) <= limit
        return out

    def meets(self, *, ttft: float | None, e2e: float | None, output_tokens: int) -> bool:
        """Every stated part met (vLLM's goodput rule); nothing stated: it finished."""
        if e2e is None:
            return False
        return all(self.met(ttft=ttft, e2e=e2e, output_tokens=output_tokens).values())

    def scaled(self, scale: float) -> Slo:
        """Every part times ``scale``."""
        return Slo(**{f"{p}_s": (self.limit(p) or 0.0) * scale for p in self.parts})

    def merged(self, other: Slo) -> Slo:
        """These limits, each part ``other`` states replacing this one's."""
        return Slo(**{f"{p}_s": other.limit(p) or self.limit(p) for p in PARTS})

    def describe(self) -> str:
        return ", ".join(f"{p} {1000 * (self.limit(p) or 0):g} ms" for p in self.parts) or "none"


class SloBounds(BaseModel):
    """The limits a request may state for itself (``x-slo-*-ms`` headers), per part, in
    seconds: [low, high]. A part without bounds may not be stated per request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_s: tuple[float, float] | None = None
    tpot_s: tuple[float, float] | None = None
    e2e_s: tuple[float, float] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> SloBounds:
        for part in PARTS:
            bounds = self.get(part)
            if bounds is not None:
                low, high = bounds
                if not (0 < low <= high and math.isfinite(high)):
                    raise ValueError(f"{part}_s bounds must be 0 < low <= high, got {bounds}")
        return self

    def get(self, part: Part) -> tuple[float, float] | None:
        value: tuple[float, float] | None = getattr(self, f"{part}_s")
        return value

    @classmethod
    def around(cls, slo: Slo, *, looser: float = 10.0) -> SloBounds:
        """The default bounds of a task with ``slo``: a request may relax a part the task
        states, up to ``looser`` times it, and not tighten it (a tighter limit is more
        urgent: it would be served sooner); a part the task does not state, not at all."""
        bounds: dict[str, tuple[float, float]] = {}
        for part in slo.parts:
            limit = slo.limit(part)
            assert limit is not None
            bounds[f"{part}_s"] = (limit, limit * looser)
        return cls(**bounds)
