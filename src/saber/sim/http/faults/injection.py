"""Fault injection: which requests fail or stall, settable at run time.

Draws come from one seeded generator, so a run with the same seed and the same
request order injects the same faults.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass

from saber.sim.http.settings import FaultSettings


@dataclass(frozen=True)
class FaultDecision:
    """What happens to one request: answered 500, or stalled after some tokens."""

    error: bool = False
    stall_after: int | None = None


class Faults:
    """The current fault settings and the random draws made against them."""

    def __init__(self, settings: FaultSettings, *, seed: int = 0) -> None:
        self.settings = settings
        self._rng = random.Random(seed)

    def decide(self) -> FaultDecision:
        s = self.settings
        if s.error_rate and self._rng.random() < s.error_rate:
            return FaultDecision(error=True)
        if s.stall_prob and self._rng.random() < s.stall_prob:
            return FaultDecision(stall_after=s.stall_after)
        return FaultDecision()

    def update(self, changes: Mapping[str, object]) -> FaultSettings:
        """Replace some settings (validated as a whole); unknown keys raise ValueError."""
        known = {f.name for f in dataclasses.fields(FaultSettings)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown fault setting(s): {', '.join(unknown)}")
        self.settings = dataclasses.replace(self.settings, **changes)  # type: ignore[arg-type]
        return self.settings
