"""The engine matrix: what it covers, and running it.

Every engine preset x workload x load grid x SLA scale, in realistic mode (clients
send their task's cap as max_tokens; in oracle mode the true length, which the
scheduler trusts), with the task types the gateway ships. Each
trace is served by every static B, by vLLM alone (max_num_seqs 256, no scheduler),
by the policy configs/gateway.yaml ships (``default``) and by each variant, the
scheduler's f(L) and TTFT fit being what saber-profile would fit on that engine; and
each of its requests alone on an idle engine, the ceiling no scheduler passes.

A trace does not depend on the SLAs, so one worker task serves one trace at every
SLA scale: the static runs once (each scored by every scale's SLAs), the
schedulers once per scale (they schedule by the SLAs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from saber.bench._goodput import OWN_SAMPLE, Goodput, own_times, with_goodput
from saber.bench._grid import (
    PAPER_BATCH_SIZES,
    PAPER_RPS,
    VLLM_DEFAULT_MAX_NUM_SEQS,
    variant_kind,
    variant_policy,
    with_default,
)
from saber.bench._offline import engine_profiles, saturation_rate
from saber.bench._pool import parallel_map
from saber.bench._runner import refused_share, rescore, serve_alone, serve_saber, serve_static
from saber.config import Part, TaskType, Workload
from saber.engine import PRESETS, EnginePreset
from saber.sim import SimResult
from saber.speed import SpeedModel, TTFTFit
from saber.workload import Mode, generate_trace

GRIDS = ("paper", "capacity")
CAPACITY_MULTIPLES = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5)
SLA_SCALES = (0.5, 1.0, 2.0)
CEILING = "ceiling"  # each request alone on an idle engine: no scheduler meets more
PROFILE_WORKLOAD = "W3"  # the mix saber-profile's closed loop is run with
# --quick: slow to fast (capacity on W3 from 2.8 to 73 requests/s), two of them short
# of KV cache (l4 and a10 with the 7B model preempt under a burst), and the paper's.
QUICK_PRESETS = (
    "l4-qwen2.5-coder-7b",
    "a10-qwen2.5-coder-7b",
    "paper",
    "l4-qwen2.5-coder-3b",
    "a100-40gb-qwen2.5-coder-7b",
    "a100-80gb-qwen2.5-coder-3b",
    "h100-qwen2.5-coder-1.5b",
)


@dataclass(frozen=True)
class Matrix:
    """What a matrix run covers. Trace seeds are ``seed_base`` + 0..seeds-1."""

    presets: tuple[str, ...] = tuple(PRESETS)
    workloads: tuple[str, ...] = ("W1", "W2", "W3")
    grids: tuple[str, ...] = GRIDS
    sla_scales: tuple[float, ...] = SLA_SCALES
    rps: tuple[float, ...] = PAPER_RPS  # the paper grid
    multiples: tuple[float, ...] = CAPACITY_MULTIPLES  # the capacity grid
    batch_sizes: tuple[int, ...] = PAPER_BATCH_SIZES
    variants: tuple[str, ...] = ("usl",)
    seeds: int = 3
    seed_base: int = 11000
    requests: int = 100
    mode: Mode = "realistic"  # oracle: max_tokens is the true length, and trusted
    goodput: Goodput | None = None  # vLLM's SLOs in place of the tasks' own

    @classmethod
    def quick(cls) -> Matrix:
        """Seven presets, slow to fast; every load; two seeds (docs/bench.md: its time)."""
        return cls(presets=QUICK_PRESETS, seeds=2)

    @property
    def policies(self) -> tuple[str, ...]:
        """The schedulers each trace is served by: ``default``, then the variants."""
        return with_default(self.variants)

    def loads(self, grid: str, capacity: float) -> list[tuple[float, float | None]]:
        """(RPS, multiple of the capacity or None) of each load of ``grid``."""
        if grid == "paper":
            return [(float(r), None) for r in self.rps]
        if grid == "capacity":
            return [(m * capacity, m) for m in self.multiples]
        raise ValueError(f"unknown load grid {grid!r}; known: {', '.join(GRIDS)}")

    def points(self, capacity: Mapping[tuple[str, str], float]) -> list[Point]:
        """Every trace; ``capacity[(preset, workload)]`` is vLLM's saturation rate."""
        return [
            Point(p, w, g, rps, multiple, s)
            for p in self.presets
            for w in self.workloads
            for g in self.grids
            for rps, multiple in self.loads(g, capacity[(p, w)])
            for s in range(self.seeds)
        ]


@dataclass(frozen=True)
class Point:
    """One trace, served at every SLA scale."""

    preset: str
    workload: str
    grid: str
    rps: float
    multiple: float | None  # of the capacity, on the capacity grid
    seed: int  # 0..seeds-1


@dataclass(frozen=True)
class EngineFit:
    """What the matrix measures of an engine before serving traces on it: the speed
    models saber-profile would fit, its TTFT fit, and the rate at which vLLM alone
    saturates on each workload (requests/s)."""

    preset: str
    models: dict[str, SpeedModel]
    ttft: TTFTFit | None
    capacity: dict[str, float]
    own: dict[str, dict[Part, float]] | None = None  # each task's own times (goodput scales)


@dataclass(frozen=True)
class Served:
    """One run's outcome, as shares of its requests (0..1)."""

    goodput: float
    refused: float


@dataclass(frozen=True)
class PointResult:
    point: Point
    runs: dict[float, dict[str, Served]]  # SLA scale -> "static:B", "vllm", "saber:<policy>"


def sla_scaled(tasks: Mapping[str, TaskType], scale: float) -> dict[str, TaskType]:
    """Task types with every part of their SLO and ``useful_s`` multiplied by ``scale``."""
    out = {}
    for name, t in tasks.items():
        useful = None if t.useful_s is None else t.useful_s * scale
        out[name] = t.model_copy(update={"useful_s": useful}).with_slo(t.slo.scaled(scale))
    return out


def fit_engine(
    preset: EnginePreset,
    tasks: Mapping[str, TaskType],
    workloads: Mapping[str, Workload],
    *,
    kinds: Sequence[str],
    capacity_of: Sequence[str],
) -> EngineFit:
    """The engine's profile (fitted on the W3 mix) and its capacity on each workload
    of ``capacity_of``."""
    models, ttft = engine_profiles(preset, workloads[PROFILE_WORKLOAD], tasks, kinds)
    sample = generate_trace(workloads[PROFILE_WORKLOAD], tasks, rps=1.0, n=OWN_SAMPLE, seed=0)
    return EngineFit(
        preset.name,
        models,
        ttft,
        {w: saturation_rate(preset, workloads[w], tasks) for w in capacity_of},
        own_times(preset, sample),
    )


def _served(result: SimResult, tasks: Mapping[str, TaskType]) -> Served:
    records = rescore(result.records, tasks)
    met = sum(r.met_sla for r in records)
    return Served(met / len(records) if records else 0.0, refused_share(result))


def run_point(
    point: Point,
    matrix: Matrix,
    preset: EnginePreset,
    models: Mapping[str, SpeedModel],
    ttft: TTFTFit | None,
    tasks: Mapping[str, TaskType],
    workloads: Mapping[str, Workload],
    own: Mapping[str, Mapping[Part, float]] | None = None,
) -> PointResult:
    tasks = with_goodput(tasks, matrix.goodput, own)
    trace = generate_trace(
        workloads[point.workload],
        tasks,
        rps=point.rps,
        n=matrix.requests,
        seed=matrix.seed_base + point.seed,
        mode=matrix.mode,
    )
    static = {f"static:{b}": serve_static(trace, preset, b, tasks) for b in matrix.batch_sizes}
    static["vllm"] = serve_static(trace, preset, VLLM_DEFAULT_MAX_NUM_SEQS, tasks)
    static[CEILING] = serve_alone(trace, preset, tasks)
    runs: dict[float, dict[str, Served]] = {}
    for scale in matrix.sla_scales:
        scaled = sla_scaled(tasks, scale)
        runs[scale] = {name: _served(r, scaled) for name, r in static.items()}
        for policy_name in matrix.policies:
            kind, policy = variant_policy(policy_name, VLLM_DEFAULT_MAX_NUM_SEQS)
            result = serve_saber(
                trace,
                preset,
                scaled,
                models[kind],
                policy,
                max_num_seqs=VLLM_DEFAULT_MAX_NUM_SEQS,
                ttft=None if ttft is None else ttft.predict,
                prefill=None if ttft is None else ttft.prefill,
                seed=point.seed,
                oracle=matrix.mode == "oracle",
            )
            runs[scale][f"saber:{policy_name}"] = _served(result, scaled)
    return PointResult(point, runs)


@dataclass(frozen=True)
class MatrixRun:
    matrix: Matrix
    fits: dict[str, EngineFit]
    results: list[PointResult]


@dataclass(frozen=True)
class _Shared:
    """What every trace's task needs: sent once to each worker process."""

    matrix: Matrix
    presets: Mapping[str, EnginePreset]
    fits: Mapping[str, EngineFit]
    tasks: Mapping[str, TaskType]
    workloads: Mapping[str, Workload]

    def fit(self, preset: EnginePreset) -> EngineFit:
        kinds = sorted({variant_kind(v) for v in self.matrix.policies})
        return fit_engine(
            preset, self.tasks, self.workloads, kinds=kinds, capacity_of=self.matrix.workloads
        )

    def run(self, point: Point) -> PointResult:
        fit = self.fits[point.preset]
        return run_point(
            point,
            self.matrix,
            self.presets[point.preset],
            fit.models,
            fit.ttft,
            self.tasks,
            self.workloads,
            fit.own,
        )


def run_matrix(
    matrix: Matrix,
    presets: Mapping[str, EnginePreset],
    tasks: Mapping[str, TaskType],
    workloads: Mapping[str, Workload],
    *,
    jobs: int | None = None,
    progress: bool = True,
) -> MatrixRun:
    """Fit each engine (one task per preset), then serve every trace (one task per
    trace). ``presets`` maps each of ``matrix.presets`` to its EnginePreset."""
    shared = _Shared(matrix, dict(presets), {}, tasks, workloads)
    wanted = [presets[p] for p in matrix.presets]
    fits = parallel_map(
        _Shared.fit, shared, wanted, description="fitting engines", jobs=jobs, progress=progress
    )
    shared = dataclasses.replace(shared, fits={f.preset: f for f in fits})
    capacity = {
        (p, w): shared.fits[p].capacity[w] for p in matrix.presets for w in matrix.workloads
    }
    points = matrix.points(capacity)
    results = parallel_map(
        _Shared.run, shared, points, description="serving traces", jobs=jobs, progress=progress
    )
    return MatrixRun(matrix, dict(shared.fits), results)
