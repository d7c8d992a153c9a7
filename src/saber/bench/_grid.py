"""What a sweep covers: the paper's grid, and a CI-sized version of it."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from saber.config import TaskType, load_gateway_config, load_tasks
from saber.scheduler import PRESETS, Policy

PAPER_RPS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20)
PAPER_BATCH_SIZES = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
VLLM_DEFAULT_MAX_NUM_SEQS = 256
"""vLLM's default max_num_seqs: vLLM alone, and the engine behind a scheduler."""
# SABER variants: a speed model, then any "+option" (docs/bench.md). Without options
# it is the paper's Algorithm 1; "+closed-loop" is the default policy, "+mean" the
# previous one (the same closed loop deciding from mean lengths), and the other
# options change one knob each.
VARIANTS = (
    "usl",
    "linear",
    "logistic",
    "usl+unprotected",
    "usl+mean",
    "usl+closed-loop",
)
DEFAULT_VARIANT = "usl+closed-loop"
"""What the gateway ships: the closed-loop policy on a USL profile."""
DEFAULT = "default"
"""A variant's name for the policy configs/gateway.yaml ships, as it ships it (its
queue_cap too), on a USL profile: every benchmark runs it, whatever ``--variants``
names, so a policy that changes the shipped file is measured without a flag."""
# Each option, as the Policy fields it sets; a preset's name sets all of them.
OPTIONS: dict[str, dict[str, Any]] = {
    "lpq_paper": {"lpq": "paper"},
    "lpq_idle": {"lpq": "idle"},
    "unprotected": {"protection": "none"},
    "frozen": {"protection": "frozen"},
    "deadline": {"order": "deadline"},
    "random": {"order": "random"},
    "calibrated": {"calibrate": True},
    "uncalibrated": {"calibrate": False},
    "learned": {"learn_lengths": True},
    "unlearned": {"learn_lengths": False},
    "conditioned": {"condition_lengths": True},
    "unconditioned": {"condition_lengths": False},
    "prefill": {"prefill": True},
    "no_prefill": {"prefill": False},
    "chance": {"decide": "chance"},
    "by_mean": {"decide": "mean"},
    "no_gain": {"gain": False},
    "no_future": {"future_weight": 0.0},
    "half_future": {"future_weight": 0.5},
    "no_late": {"late_value": 0.0},
    **{name: dataclasses.asdict(policy) for name, policy in PRESETS.items()},
}


def parse_variant(variant: str) -> tuple[str, dict[str, Any]]:
    """``"usl+closed-loop+frozen"`` -> ("usl", the Policy fields its options set, in
    order: a preset sets every knob, then later options change theirs)."""
    kind, *options = variant.split("+")
    fields: dict[str, Any] = {}
    for option in options:
        if option not in OPTIONS:
            raise ValueError(f"unknown option {option!r} in variant {variant!r}")
        fields.update(OPTIONS[option])
    for operational in ("max_concurrency", "queue_cap"):
        fields.pop(operational, None)
    return kind, fields


@functools.cache
def shipped_policy() -> Policy:
    """The policy configs/gateway.yaml ships, the environment ignored."""
    return Policy.from_config(load_gateway_config(env={}))


def shipped_tasks() -> dict[str, TaskType]:
    """The paper's four task types with the paper's SLAs (configs/tasks.yaml: the whole
    answer within Table I's time) and the useful_s configs/gateway.yaml gives them, the
    environment ignored: what the benchmarks serve, whatever SLOs the gateway ships
    (docs/gateway.md, "Choosing SLOs")."""
    shipped = load_gateway_config(env={}).tasks
    return {
        name: task.model_copy(update={"useful_s": shipped[name].useful_s})
        for name, task in load_tasks().items()
    }


def benchmark_tasks() -> dict[str, TaskType]:
    """Every task type configs/gateway.yaml ships, the paper's four as ``shipped_tasks``
    (their whole-answer SLAs): what the long scenarios and the scripts under bench/
    serve."""
    return {**load_gateway_config(env={}).tasks, **shipped_tasks()}


def variant_kind(variant: str) -> str:
    """The speed model a variant runs on: ``default``'s is USL (what saber-profile fits)."""
    return "usl" if variant == DEFAULT else parse_variant(variant)[0]


def with_default(variants: Iterable[str]) -> tuple[str, ...]:
    """``default`` first, then ``variants`` (without a second ``default``)."""
    return (DEFAULT, *(v for v in variants if v != DEFAULT))


def variant_policy(variant: str, max_concurrency: int, **fields: Any) -> tuple[str, Policy]:
    """A variant's speed model and its policy at ``max_concurrency`` requests at the
    engine; ``fields`` set more knobs of a ``+option`` variant (not of ``default``)."""
    if variant == DEFAULT:
        return "usl", dataclasses.replace(shipped_policy(), max_concurrency=max_concurrency)
    kind, options = parse_variant(variant)
    return kind, Policy(**{**options, **fields, "max_concurrency": max_concurrency})


@dataclass(frozen=True)
class Sweep:
    """One benchmark's grid.

    ``requests`` per run: 100, as in the paper. Under overload the outcome of a
    run depends on its length: 100 arrivals at 20 RPS are a 5-second burst, and
    the paper's findings (large B collapsing W1) are about such bursts; a much
    longer run measures an ever-growing FCFS queue instead. Stability comes from
    seeds rather than length: 10 seeds per point, each a different trace.
    """

    workloads: tuple[str, ...] = ("W1", "W2", "W3")
    rps: tuple[float, ...] = PAPER_RPS
    batch_sizes: tuple[int, ...] = PAPER_BATCH_SIZES
    modes: tuple[str, ...] = ("oracle", "realistic")
    variants: tuple[str, ...] = VARIANTS
    seeds: int = 10
    requests: int = 100
    preset: str = "paper"
    window_size: int | None = None  # None: each variant's own
    saber_max_num_seqs: int = 256
    profile_points: int = 1000
    # Trace seeds are seed_base + 0..seeds-1: another base gives held-out traces.
    seed_base: int = 1000

    def policy(self, **options: Any) -> Policy:
        """SABER's policy in this sweep, with a variant's options."""
        fields = {**options, "max_concurrency": self.saber_max_num_seqs}
        if self.window_size is not None:
            fields["window_size"] = self.window_size
        return Policy(**fields)

    def variant_policy(self, variant: str) -> tuple[str, Policy]:
        """A variant's speed model and policy in this sweep (``--window-size`` applies
        to every variant but ``default``)."""
        window = {} if self.window_size is None else {"window_size": self.window_size}
        return variant_policy(variant, self.saber_max_num_seqs, **window)

    @classmethod
    def quick(cls) -> Sweep:
        """Small enough for CI: a few RPS, a coarse B grid, one seed."""
        return cls(
            rps=(2, 5, 10, 20),
            batch_sizes=(10, 30, 50, 70, 100),
            seeds=2,
            profile_points=400,
        )

    def cells(self) -> list[Cell]:
        return [
            Cell(w, float(r), m, s)
            for w in self.workloads
            for r in self.rps
            for m in self.modes
            for s in range(self.seeds)
        ]


@dataclass(frozen=True, order=True)
class Cell:
    """One trace: a workload at a rate, in one output-length mode, with one seed.
    Every static B and every SABER variant is run on the same trace."""

    workload: str
    rps: float
    mode: str
    seed: int
