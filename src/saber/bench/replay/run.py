"""A replay: what it covers, each engine's set-up, and serving the windows.

Each measured window is served, at every load, by vLLM alone (max_num_seqs 256, no
scheduler), every static max_num_seqs B, the shipped default policy (``default``), the
default told every request's length (``told``), told the lengths of one task type only
(``told:<task>``, where the trace has several), each variant, and each request alone
(``ceiling``). The schedulers run as shipped: at max_concurrency 256 in front of an
engine with max_num_seqs 256, on the speed model and TTFT fit saber-profile would fit
on that engine, with the online refit on.

Warm-up: a gateway in production has served traffic before. A scheduler serving a
window starts from what the same policy learned serving the window before it, at the
same load on the same engine (``warmup``), as a gateway restarted from its state file;
the first window only warms up the second. Static runs learn nothing.

Work is parallel by (engine, load, what serves): one task serves every window with a
policy (the windows in order, for the warm-up), or every window with every static
run and the ceiling.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from saber.bench._goodput import Goodput, own_times, with_goodput
from saber.bench._grid import (
    DEFAULT,
    PAPER_BATCH_SIZES,
    VLLM_DEFAULT_MAX_NUM_SEQS,
    parse_variant,
    shipped_policy,
    shipped_tasks,
    variant_kind,
    variant_policy,
)
from saber.bench._offline import burst_rate, engine_profiles
from saber.bench._pool import parallel_map
from saber.bench._runner import refused_share, serve_alone, serve_static
from saber.bench.matrix.run import CEILING, PROFILE_WORKLOAD
from saber.bench.replay.cases import load_case
from saber.bench.replay.tasks import alone_p90, on_engine, trace_tasks, with_caps
from saber.bench.replay.warmup import Learned, learned, restore
from saber.bench.replay.windows import mean_rate, scaled, window_starts
from saber.config import TaskType, load_workloads
from saber.engine import Engine, EnginePreset
from saber.scheduler import Policy, Scheduler
from saber.sim import SimResult, simulate
from saber.speed import LiveFit, SpeedModel, TTFTFit
from saber.workload import UNNAMED_TASK, TraceRequest

RateOf = Literal["capacity", "trace"]
Told = bool | frozenset[str]  # simulate's trust_max_tokens: all, none, or these tasks
# The paper's engine and three 7B engines, slow to fast: vLLM alone saturates at 1.9
# (A10), 3.2 (paper), 4.7 (A100-80GB), 14.4 (H100) requests/s on azure-code, and 2.4,
# 4.8, 10.2, 23.9 on joint-W1.
PRESETS = ("paper", "a10-qwen2.5-coder-7b", "a100-80gb-qwen2.5-coder-7b", "h100-qwen2.5-coder-7b")
RATES = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
# The default before round 4: without lengths conditioned on what requests carry, and
# without prompts priced (the prefill).
VARIANTS = ("default+unconditioned+no_prefill",)
TOLD = "told"
STATIC = "static"  # the task that serves every static B, vLLM alone and the ceiling
VLLM = "vllm"
BURST = 1024  # requests in the burst that measures an engine's capacity on the trace


@dataclass(frozen=True)
class Replay:
    """What a replay covers (``saber-bench replay``'s options)."""

    trace: str
    presets: tuple[str, ...] = PRESETS
    windows: int = 8
    window_size: int = 300
    start: int | None = None  # None: the windows spread over the trace
    rates: tuple[float, ...] = RATES  # multiples of the capacity or of the trace's rate
    rate_of: RateOf = "capacity"
    batch_sizes: tuple[int, ...] = PAPER_BATCH_SIZES
    variants: tuple[str, ...] = VARIANTS
    sla_scale: float = 1.5
    max_tokens: int | None = None
    goodput: Goodput | None = None  # SLOs in vLLM's form, for every task in place of its own

    @classmethod
    def quick(cls, trace: str) -> Replay:
        """CI-sized: the paper's engine, 2 windows of 100, 2 loads, a coarse B grid."""
        return cls(
            trace, presets=("paper",), windows=2, window_size=100, rates=(0.5, 1.5),
            batch_sizes=(10, 30, 60, 100),
        )  # fmt: skip


@dataclass(frozen=True)
class ReplayTrace:
    """A trace ready to replay: its requests by arrival, each with its cap; where each
    window starts (the first window warms up); its task types (the unnamed one's SLA
    still to be set per engine); its own mean rate."""

    name: str
    requests: tuple[TraceRequest, ...]
    starts: tuple[int, ...]
    size: int
    tasks: dict[str, TaskType]
    rate: float

    def window(self, k: int) -> tuple[TraceRequest, ...]:
        return self.requests[self.starts[k] : self.starts[k] + self.size]

    @property
    def measured(self) -> range:
        return range(1, len(self.starts))

    def policies(self, variants: Sequence[str]) -> tuple[str, ...]:
        """The schedulers each window is served by."""
        told = [f"{TOLD}:{t}" for t in self.tasks] if len(self.tasks) > 1 else []
        return (DEFAULT, TOLD, *told, *(v for v in variants if v not in (DEFAULT, TOLD)))


def prepare(replay: Replay) -> ReplayTrace:
    """Load (or generate) the trace and cut it. Raises ValueError saying what is wrong."""
    needed = (replay.start or 0) + (replay.windows + 1) * replay.window_size
    requests = load_case(replay.trace, max(needed, BURST))
    starts = window_starts(len(requests), replay.windows, replay.window_size, replay.start)
    tasks = trace_tasks(requests, shipped_tasks(), replay.max_tokens)
    for k, first in enumerate(starts):
        try:
            mean_rate(requests[first : first + replay.window_size])
        except ValueError as exc:
            raise ValueError(f"window {k} (from request {first}): {exc}") from None
    return ReplayTrace(
        replay.trace,
        tuple(with_caps(requests, tasks)),
        tuple(starts),
        replay.window_size,
        tasks,
        mean_rate(requests),
    )


@dataclass(frozen=True)
class EngineSetup:
    """An engine before it serves: the speed models and TTFT fit saber-profile would fit
    (on the W3 mix), the rate at which vLLM alone saturates on the trace (a burst of
    ``BURST`` of its requests), the task types its runs are scheduled and scored by,
    and the unnamed task's 90th percentile time alone (None: no unnamed task)."""

    preset: str
    models: dict[str, SpeedModel]
    ttft: TTFTFit | None
    capacity: float
    tasks: dict[str, TaskType]
    alone_p90_s: float | None

    @property
    def sla_s(self) -> float | None:
        task = self.tasks.get(UNNAMED_TASK)
        return None if task is None else task.sla_s


@dataclass(frozen=True)
class Unit:
    """One task of the pool: every measured window at one load, served one way."""

    preset: str
    multiple: float
    rps: float
    serves: str  # STATIC, or a policy


@dataclass(frozen=True)
class WindowRun:
    """One window served one way: shares of its requests (0..1)."""

    preset: str
    multiple: float
    rps: float
    window: int  # 1..windows (0 warms up and is not reported)
    first: int  # the index in the trace of the window's first request
    policy: str  # "static:B", VLLM, CEILING, or a scheduler's policy
    goodput: float
    refused: float
    swaps: int = 0  # refits swapped in


def burst_of(requests: Sequence[TraceRequest], n: int = BURST) -> list[TraceRequest]:
    """``n`` requests spread evenly over the trace (cycling through it if it is shorter,
    each copy with an id of its own)."""
    picked = [requests[i * len(requests) // n] for i in range(n)]
    return [dataclasses.replace(r, id=f"b{i}") for i, r in enumerate(picked)]


def policy_of(name: str) -> tuple[str, Policy, Told]:
    """A policy's speed model kind, its Policy at max_concurrency 256, and whose
    lengths it is told: ``default``, ``told``, ``told:<task>``, ``default+<options>``
    (the shipped policy with the options' knobs), or a matrix variant."""
    at = VLLM_DEFAULT_MAX_NUM_SEQS
    if name in (DEFAULT, TOLD) or name.startswith((f"{TOLD}:", f"{DEFAULT}+")):
        policy = dataclasses.replace(shipped_policy(), max_concurrency=at)
        if name.startswith(f"{DEFAULT}+"):
            policy = dataclasses.replace(policy, **parse_variant(f"usl{name[len(DEFAULT) :]}")[1])
        told: Told = name == TOLD or (
            frozenset({name.split(":", 1)[1]}) if name.startswith(f"{TOLD}:") else False
        )
        return "usl", policy, told
    kind, policy = variant_policy(name, at)
    return kind, policy, False


def kind_of(name: str) -> str:
    """The speed model a policy runs on."""
    if name in (DEFAULT, TOLD) or name.startswith((f"{TOLD}:", f"{DEFAULT}+")):
        return "usl"
    return variant_kind(name)


def told_window(window: Sequence[TraceRequest], told: Told) -> list[TraceRequest]:
    """The window as clients that know their answers' lengths send it: a told request's
    max_tokens is its true length."""
    if told is False:
        return list(window)
    return [
        dataclasses.replace(r, max_tokens=r.output_tokens) if told is True or r.task in told else r
        for r in window
    ]


def serve_policy(
    window: Sequence[TraceRequest],
    preset: EnginePreset,
    setup: EngineSetup,
    name: str,
    *,
    seed: int,
    state: Learned | None = None,
) -> tuple[SimResult, Scheduler]:
    """``window`` served by the scheduler of policy ``name``, as shipped (online refit
    on), started from ``state`` (what it learned before) if given."""
    kind, policy, told = policy_of(name)
    fit = setup.ttft
    sched = Scheduler(
        setup.models[kind],
        policy,
        tasks=setup.tasks,
        ttft=None if fit is None else fit.predict,
        prefill=None if fit is None else fit.prefill,
        seed=seed,
    )
    if state is not None:
        restore(sched, state)
    result = simulate(
        told_window(window, told),
        Engine(preset, max_num_seqs=VLLM_DEFAULT_MAX_NUM_SEQS),
        tasks=setup.tasks,
        scheduler=sched,
        trust_max_tokens=told,
        refit=LiveFit(),
    )
    return result, sched


@dataclass(frozen=True)
class Shared:
    """What every task of the pool needs: sent once to each worker process."""

    replay: Replay
    trace: ReplayTrace
    presets: Mapping[str, EnginePreset]
    setups: Mapping[str, EngineSetup] = dataclasses.field(default_factory=dict)

    def setup(self, preset: EnginePreset) -> EngineSetup:
        tasks = shipped_tasks()
        kinds = sorted({kind_of(p) for p in self.trace.policies(self.replay.variants)})
        models, ttft = engine_profiles(
            preset, load_workloads(tasks=tasks)[PROFILE_WORKLOAD], tasks, kinds
        )
        trace = self.trace
        capacity = burst_rate(preset, burst_of(trace.requests), trace.tasks)
        unnamed = [r for k in trace.measured for r in trace.window(k) if r.task == UNNAMED_TASK]
        p90 = alone_p90(unnamed, preset, trace.tasks) if unnamed else None
        sla = None if p90 is None else self.replay.sla_scale * p90
        served = on_engine(trace.tasks, sla)
        if self.replay.goodput is not None:
            measured = [r for k in trace.measured for r in trace.window(k)]
            served = with_goodput(served, self.replay.goodput, own_times(preset, measured))
        return EngineSetup(preset.name, models, ttft, capacity, served, p90)

    def serve(self, unit: Unit) -> list[WindowRun]:
        preset, setup = self.presets[unit.preset], self.setups[unit.preset]
        trace, out = self.trace, []

        def run(k: int, policy: str, result: SimResult) -> None:
            if k > 0:  # window 0 only warms up
                out.append(
                    WindowRun(unit.preset, unit.multiple, unit.rps, k, trace.starts[k], policy,
                              result.goodput(), refused_share(result), len(result.swaps))
                )  # fmt: skip

        state: Learned | None = None
        ks = trace.measured if unit.serves == STATIC else range(len(trace.starts))
        for k in ks:
            window = scaled(trace.window(k), unit.rps)
            if unit.serves == STATIC:
                for b in (*self.replay.batch_sizes, VLLM_DEFAULT_MAX_NUM_SEQS):
                    name = VLLM if b == VLLM_DEFAULT_MAX_NUM_SEQS else f"static:{b}"
                    run(k, name, serve_static(window, preset, b, setup.tasks))
                run(k, CEILING, serve_alone(window, preset, setup.tasks))
                continue
            result, sched = serve_policy(window, preset, setup, unit.serves, seed=k, state=state)
            run(k, unit.serves, result)
            state = learned(sched, setup.models[kind_of(unit.serves)])
        return out


def loads(replay: Replay, trace: ReplayTrace, setup: EngineSetup) -> list[tuple[float, float]]:
    """(multiple, requests/s) of each load on this engine."""
    base = setup.capacity if replay.rate_of == "capacity" else trace.rate
    return [(m, m * base) for m in replay.rates]


@dataclass(frozen=True)
class ReplayRun:
    replay: Replay
    trace: ReplayTrace
    policies: tuple[str, ...]
    setups: dict[str, EngineSetup]
    runs: list[WindowRun]


def run_replay(
    replay: Replay,
    trace: ReplayTrace,
    presets: Mapping[str, EnginePreset],
    *,
    jobs: int | None = None,
    progress: bool = True,
) -> ReplayRun:
    """Set each engine up (one task per engine), then serve (one task per engine, load
    and way of serving: ``Unit``)."""
    shared = Shared(replay, trace, dict(presets))
    wanted = [presets[p] for p in replay.presets]
    setups = parallel_map(
        Shared.setup, shared, wanted, description="fitting engines", jobs=jobs, progress=progress
    )
    shared = dataclasses.replace(shared, setups={s.preset: s for s in setups})
    policies = trace.policies(replay.variants)
    # The policies first: each serves one more window, and more slowly.
    units = [
        Unit(p, m, rps, serves)
        for serves in (*policies, STATIC)
        for p in replay.presets
        for m, rps in loads(replay, trace, shared.setups[p])
    ]
    done = parallel_map(
        Shared.serve, shared, units, description="serving windows", jobs=jobs, progress=progress
    )
    return ReplayRun(
        replay, trace, policies, dict(shared.setups), [r for rows in done for r in rows]
    )
