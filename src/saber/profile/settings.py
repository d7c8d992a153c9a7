"""What a profiling run measures and what it learnt beside its points.

``RunSettings`` is kept as the points file's first line, so a resume can check it is
the same run; ``SessionResult`` is what the session tells the report about the backend.
Neither touches the network: ``saber.profile.session`` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from saber.backend import BackendInfo
from saber.profile.stream import Endpoint


@dataclass(frozen=True)
class RunSettings:
    """What a run measures; kept as the points file's first line so a resume can check it."""

    base_url: str
    model: str
    endpoint: Endpoint
    source: str
    levels: tuple[int, ...]
    requests_per_level: int
    warmup: int | None  # None: L requests at load L
    seed: int
    rounds: int = 1
    level_s: float | None = None
    """``--quick``: seconds a visit to load 1 lasts, warm-up included; a visit to load L
    lasts longer (``seconds_for``). None: a visit lasts until it has its counted points."""

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "base_url": self.base_url,
            "model": self.model,
            "endpoint": self.endpoint,
            "source": self.source,
            "levels": list(self.levels),
            "requests_per_level": self.requests_per_level,
            "warmup": self.warmup,
            "seed": self.seed,
            "rounds": self.rounds,
            "level_s": self.level_s,
            "started_at": datetime.now(UTC).isoformat(),
        }

    def seconds_for(self, level: int) -> float | None:
        """How long a timed visit to ``level`` lasts: ``level_s`` at load 1, half as long
        again for each doubling of the load (8 s at 1 to 32 s at 64): requests take longer
        at higher loads, and the long ones of a mix must be able to finish within a visit,
        or it measures the short ones only. None: not timed."""
        if self.level_s is None:
            return None
        return self.level_s * (1.0 + 0.5 * math.log2(level))

    def plan_text(self, visits: int, total: float) -> str:
        """What the run will take, said before it starts: ``visits`` visits to levels, which
        add up to ``total`` seconds (timed) or requests."""
        if self.level_s is not None:
            return (
                f"quick run: {visits} visits, {self.level_s:g} s at load 1 and longer at "
                f"higher loads: {minutes(total + FIT_S)} in all"
            )
        return (
            f"full run: {round(total):,} requests over {len(self.levels)} levels in "
            f"{self.rounds} round(s), warm-up included; the ETA shows as they run (about 12 "
            f"min on saber-sim's paper preset; --quick takes about {minutes(QUICK_S)})"
        )

    def warmup_for(self, level: int) -> int:
        return level if self.warmup is None else self.warmup

    def quota(self, round: int) -> int:
        """Counted points one visit collects: the level's share of round ``round`` (a
        visit beyond ``rounds`` replaces one, so it collects the most any round does)."""
        base, extra = divmod(self.requests_per_level, self.rounds)
        return base + (1 if round < extra or (round >= self.rounds and extra) else 0)

    def visits(self) -> list[tuple[int, int]]:
        """(round, level index) in the order they run: up, then down, then up..."""
        indices = list(range(len(self.levels)))
        return [
            (r, i) for r in range(self.rounds) for i in (indices if r % 2 == 0 else indices[::-1])
        ]


@dataclass
class SessionResult:
    """What the run learnt beyond the points themselves."""

    backend: BackendInfo | None = None
    lengths_forced: bool = True
    usage_reported: bool = True
    short: int = 0
    too_long: int = 0
    metrics_unavailable: bool = False
    messages: list[str] = field(default_factory=list)


def root_url(base_url: str) -> str:
    """The server's root: accepts ``http://host:port`` and the OpenAI-style ``.../v1``."""
    root = base_url.strip().rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


FIT_S = 10.0
"""About what the checks, the fits and the plot add to a run's levels, in seconds."""
QUICK_S = 150.0
"""A quick run of the default levels: 140 s of levels (``saber.profile.run.QUICK_LEVEL_S``
at load 1), and ``FIT_S``."""


def minutes(seconds: float) -> str:
    """A duration as ``2 min 30 s`` (or ``45 s``)."""
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"
