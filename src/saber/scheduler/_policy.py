"""The knobs of admission, and the two named policies: the paper's and the default."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Protection = Literal["frozen", "none"]
Order = Literal["random", "deadline"]
LowQueue = Literal["paper", "idle"]
Decide = Literal["mean", "chance"]


@dataclass(frozen=True, slots=True)
class Policy:
    """How the scheduler admits. ``Policy()`` is Algorithm 1 as the paper describes it.

    ``decide``: what a decision compares. ``"mean"``, the paper: a request's expected
    length (its task's mean) against f x time left. ``"chance"``: the chance that it
    finishes in time, from its task's learned length distribution and the speed
    model's measured spread (``saber.scheduler._chance``, docs/admission.md). A
    waiting request is admitted, most urgent first, while its chance at f(L + 1)
    clears what one more sequence costs the running requests (``gain``) and those
    arriving while it runs (the share ``future_weight`` of their loss: 0..1), in
    requests on schedule; it is demoted once its chance even at f(1) is below
    ``demote_below``, and rejected once its chance of finishing within ``useful_s`` is
    below ``refuse_below``. Demoted requests run while none of the HPQ waits and they
    cost less than ``late_value`` more than they may still win: what a late answer is
    worth against one on time. Whatever the predictions, an engine with nothing
    running is given a waiting request.

    With ``decide="mean"``: ``order``, which waiting request is admitted:
    ``"random"``, the paper: the first that passes among ``window_size`` requests
    from the front of the HPQs (oldest first), tried in random order (RandomSample,
    against head-of-line blocking); ``"deadline"``: the most urgent of all waiting
    requests that pass. ``protection``: ``"frozen"``, the paper: a running request is
    protected against the required speed recorded at admission; ``"none"``: line 10
    as its pseudocode reads in Python (``any()`` is a bool), only the newcomer's own
    need is checked. ``lpq``: ``"paper"``, demoted requests run whenever every HPQ is
    empty; ``"idle"``: only while no HPQ request waits or runs, up to the load at
    which a new arrival of any task could still be admitted at once.

    ``calibrate``: scale f(L) by observed over predicted speed, learned from every
    finished request (an EWMA), so admission follows the engine it really has.
    ``learn_lengths``: learn each task's answer lengths instead of trusting its
    configured mean. ``condition_lengths`` (with it): learn them also given what each
    request carries (its prompt's size, a fingerprint), used per task only where that
    predicts the answers that follow better than the task's own distribution
    (``saber.scheduler.lengths._conditioned``). ``prefill`` (with ``decide="chance"``): count a
    request's prompt: its prefill beyond what f(L) counts for a request of its length
    comes before its decoding, and puts off every running request's decoding by as
    much (the profile's prefill per prompt token; without one, nothing).
    ``max_concurrency``: a hard cap on sequences at the backend.
    ``queue_cap``: the most requests of one task that may wait; past it an arrival is
    rejected.
    """

    window_size: int = 8
    order: Order = "random"
    protection: Protection = "frozen"
    lpq: LowQueue = "paper"
    calibrate: bool = False
    learn_lengths: bool = False
    condition_lengths: bool = False
    prefill: bool = False
    decide: Decide = "mean"
    demote_below: float = 0.1
    refuse_below: float = 0.02
    gain: bool = True
    future_weight: float = 1.0
    late_value: float = 0.05
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
            ("protection", ("frozen", "none")),
            ("lpq", ("paper", "idle")),
            ("decide", ("mean", "chance")),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}")
        for name in ("demote_below", "refuse_below", "late_value"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be within [0, 1)")
        if not 0.0 <= self.future_weight <= 1.0:
            raise ValueError("future_weight must be within [0, 1]")

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
    calibrate=True,
    learn_lengths=True,
    condition_lengths=True,
    prefill=True,
    decide="chance",
)
MEAN = Policy(order="deadline", protection="none", lpq="idle", calibrate=True, learn_lengths=True)
PRESETS: dict[str, Policy] = {"paper": PAPER, "closed-loop": CLOSED_LOOP, "mean": MEAN}
"""``paper``: Algorithm 1 as published. ``closed-loop``: the default, the best policy
measured across the engine matrix on traces not used to choose it (docs/bench.md):
decisions from the chance of finishing in time. ``mean``: the previous default, the
same closed loop deciding from each task's mean length (kept to measure against)."""
DEFAULT = "closed-loop"
