"""Sections of saber-gateway's settings that stand on their own: several gateways
(``cluster``), the online refit (``refit``) and the backend's other routes
(``passthrough``). Part of ``saber.config._gateway``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ClusterSettings(BaseModel):
    """Several gateways in front of the same backends, sharing no store (docs/deploy.md),
    and how one gateway keeps a session on one of several backends."""

    model_config = ConfigDict(extra="forbid")

    gateways: int = Field(
        default=1,
        ge=1,
        description="how many gateways serve these backends, behind a balancer that "
        "hashes clients (API keys) over them",
    )
    headroom: int | None = Field(
        default=None,
        ge=0,
        description="sequences kept free at each backend for what the other gateways "
        "admit between two reads of its /metrics; set, also a bound: each gateway then "
        "admits at most headroom // (gateways - 1) (at least 1) there per interval; null: "
        "derived, (gateways - 1) x what this one admitted there over the last interval, "
        "no bound",
    )
    stale: Literal["open", "closed"] = Field(
        default="open",
        description="a backend whose /metrics has not been read for 3 intervals (at least "
        "5 s): open, count only this gateway's own requests there (and the headroom); "
        "closed, place nothing new there until it is read again",
    )
    affinity_margin: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="of several backends, a session's requests (API key + affinity_header) "
        "stay on one backend, where its prefix cache pays off, while their chance of "
        "meeting the SLA there is within this much (a chance, 0..1) of the best backend's; "
        "0.05 gives up at most 1 in 20 of a request's chance for a warm cache. null: off",
    )
    affinity_header: str = Field(
        default="x-session-id",
        pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$",
        description="the header that names an editor session, for affinity_margin",
    )


class RefitSettings(BaseModel):
    """Refitting f(L) online on what the engine delivers (docs/gateway.md, "Learning")."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="refit f(L) and swap it in when it departs")
    interval_s: float = Field(default=10.0, gt=0, description="how often a refit is considered")
    window: int = Field(default=2000, ge=20, description="finished requests refitted on")
    min_points: int = Field(default=200, ge=10, description="the fewest to refit on")
    every: int = Field(default=200, ge=1, description="new finished requests between refits")
    margin: float = Field(
        default=0.15, gt=0, description="relative departure, over the loads seen, that swaps"
    )

    @model_validator(mode="after")
    def _window_holds_min_points(self) -> RefitSettings:
        if self.window < self.min_points:
            raise ValueError(f"window ({self.window}) is below min_points ({self.min_points})")
        return self


class PassthroughSettings(BaseModel):
    """The backend's other routes (embeddings, tokenize, pooling, scoring, version),
    relayed as they are, beside the scheduled completions (docs/gateway.md)."""

    model_config = ConfigDict(extra="forbid")

    max_concurrency: int = Field(
        default=8, ge=1, description="most such requests at the backend at once"
    )
    queue_cap: int = Field(
        default=256, ge=0, description="most waiting for one of those places; past it, 429"
    )
