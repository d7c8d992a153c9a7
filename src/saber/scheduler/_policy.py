"""The knobs of admission, and the two named policies: the paper's and the default."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Protection = Literal["frozen", "progress", "value", "none"]
Order = Literal["random", "deadline"]
LowQueue = Literal["paper", "guard", "idle"]


@dataclass(frozen=True, slots=True)
class Policy:
    """How the scheduler admits. ``Policy()`` is Algorithm 1 as the paper describes it.

    ``order``: which waiting request is admitted. ``"random"``, the paper: the first
    that passes among ``window_size`` requests from the front of the HPQs (oldest
    first), tried in random order (RandomSample, against head-of-line blocking).
    ``"deadline"``: the most urgent of all waiting requests that pass, found in
    O(log n) per group of requests of one task and length (no window, so no
    head-of-line blocking at all).
    ``window_size``: the paper's windowSize (``"random"`` order only).
    ``protection``: what a running request is protected against (line 10's second
    condition). ``"frozen"``, the paper: the required speed recorded at admission.
    ``"progress"``: the speed it still needs, from its progress (the tokens it has
    streamed, else a token clock) and its expected remaining length. ``"value"``:
    progress-aware, and protected only while that keeps more requests on schedule
    than giving it up would. ``"none"``: line 10 as its pseudocode reads in Python
    (``any()`` is a bool): only the newcomer's own need is checked.
    ``lpq``: when demoted requests run. ``"paper"``: whenever every HPQ is empty.
    ``"guard"``: also only while f(L+1) still meets every running HPQ request's
    need. ``"idle"``: only while no HPQ request waits or runs, and only up to the
    load at which a new arrival of any task could still be admitted at once, so
    best-effort work never delays the recovery after a burst.
    ``calibrate``: scale f(L) by observed over predicted speed, learned from every
    finished request (an EWMA), so admission follows the engine it really has.
    ``learn_lengths``: expect each task's learned mean answer length instead of
    its configured one.
    ``max_concurrency``: a hard cap on requests at the backend. ``queue_cap``: the
    most requests of one task that may wait; past it an arrival is rejected.
    """

    window_size: int = 8
    order: Order = "random"
    protection: Protection = "frozen"
    lpq: LowQueue = "paper"
    calibrate: bool = False
    learn_lengths: bool = False
    max_concurrency: int | None = None
    queue_cap: int | None = None

    def __post_init__(self) -> None:
        if self.window_size < 1:
            raise ValueError("window_size must be >= 1")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if self.queue_cap is not None and self.queue_cap < 0:
            raise ValueError("queue_cap must be >= 0")
        for name, allowed in (
            ("order", ("random", "deadline")),
            ("protection", ("frozen", "progress", "value", "none")),
            ("lpq", ("paper", "guard", "idle")),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}")

    @classmethod
    def named(cls, name: str, **overrides: Any) -> Policy:
        """A named policy (``PRESETS``), with any knob overridden."""
        try:
            base = PRESETS[name]
        except KeyError:
            known = ", ".join(sorted(PRESETS))
            raise ValueError(f"unknown policy {name!r}; known: {known}") from None
        return dataclasses.replace(base, **overrides)

    @classmethod
    def from_config(cls, config: object, **overrides: Any) -> Policy:
        """The policy a settings object names: its ``policy`` preset (default:
        ``closed-loop``), then each Policy field it carries that is not None, then
        ``overrides``. The one place settings become a policy."""
        fields = {
            f.name: getattr(config, f.name)
            for f in dataclasses.fields(cls)
            if getattr(config, f.name, None) is not None
        }
        return cls.named(getattr(config, "policy", None) or DEFAULT, **{**fields, **overrides})

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PAPER = Policy()
CLOSED_LOOP = Policy(
    order="deadline",
    protection="none",
    lpq="idle",
    calibrate=True,
    learn_lengths=True,
)
PRESETS: dict[str, Policy] = {"paper": PAPER, "closed-loop": CLOSED_LOOP}
"""``paper``: Algorithm 1 as published. ``closed-loop``: the default, the best policy
measured in realistic mode on held-out traces and in long runs (docs/bench.md)."""
DEFAULT = "closed-loop"
