"""What a profiling run measures and what it learnt beside its points.

``RunSettings`` is kept as the points file's first line, so a resume can check it is
the same run; ``SessionResult`` is what the session tells the report about the backend.
Neither touches the network: ``saber.profile.session`` does.
"""

from __future__ import annotations

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
            "started_at": datetime.now(UTC).isoformat(),
        }

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
