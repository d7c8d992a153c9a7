"""A pool of replicas: what a run covers, the ways to serve a trace on it, and running it.

Every workload x load x seed is one trace, in realistic mode (clients send their
task's cap as max_tokens; in oracle mode the true length, which the gateway trusts),
with the task types the gateway ships; loads are multiples of the pool's capacity, the
sum of the rate at which vLLM alone saturates each replica. Each trace is served by
every policy on fresh engines with vLLM's default ``max_num_seqs``, and each of its
requests alone on each kind of replica (the ceiling). ``saber xM``: M gateways in front
of the pool, each the ``saber`` policy's own pool, knowing of the others only by
scraping the replicas.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from saber.bench._grid import VLLM_DEFAULT_MAX_NUM_SEQS, shipped_policy
from saber.bench._offline import engine_profiles, saturation_rate
from saber.bench._pool import parallel_map
from saber.bench._runner import serve_alone, summarize
from saber.config import TaskType, Workload
from saber.engine import Engine, EnginePreset
from saber.scheduler import PLACEMENTS, Placement, Pool
from saber.sim import ROUTERS, SCRAPE_S, ClusterResult, simulate_cluster
from saber.speed import SpeedModel, TTFTFit
from saber.workload import Mode, TraceRequest, generate_trace

POOL = "2xa10-qwen2.5-coder-3b,1xa100-40gb-qwen2.5-coder-3b"
"""The default pool: one model on two kinds of accelerator, the fast one about twice
as fast as each slow one."""
MULTIPLES = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
REQUESTS_PER_REPLICA = 100
"""A trace's requests for each replica of the pool, as the matrix serves 100 to one
engine: a trace then spans as long at a load multiple whatever the pool's size. At 1x
of three A10s, 200 requests all arrive within 7 s, less than the longest SLA (12 s):
a burst that ends before the queues it builds matter, not a load."""

PROFILE_WORKLOAD = "W3"  # the mix each replica's profile is fitted on, as in the matrix


@dataclass(frozen=True)
class ReplicaFit:
    """What saber-profile would fit on one replica's engine: f(L) and the TTFT fit."""

    speed: SpeedModel
    ttft: TTFTFit | None


ServeFn = Callable[
    [Sequence[TraceRequest], list[Engine], Mapping[str, TaskType], Sequence[ReplicaFit]],
    ClusterResult,
]
"""One way to serve a trace on the pool: (trace, fresh engines, task types, each
replica's fit) -> result."""


def _behind_router(
    name: str,
    trace: Sequence[TraceRequest],
    engines: list[Engine],
    tasks: Mapping[str, TaskType],
    fits: Sequence[ReplicaFit],
) -> ClusterResult:
    return simulate_cluster(trace, engines, tasks=tasks, router=ROUTERS[name]())


def _pool(
    place: Placement,
    tasks: Mapping[str, TaskType],
    fits: Sequence[ReplicaFit],
    arrival_share: float = 1.0,
) -> Pool:
    """The gateway's admission (the shipped policy) over the pool, each replica with its
    own profile, placing by ``place``; one of several gateways sees ``arrival_share``
    of the arrivals."""
    policy = dataclasses.replace(shipped_policy(), max_concurrency=VLLM_DEFAULT_MAX_NUM_SEQS)
    return Pool.build(
        [f.speed for f in fits],
        policy,
        tasks=tasks,
        ttfts=[None if f.ttft is None else f.ttft.predict for f in fits],
        place=place,
        arrival_share=arrival_share,
    )


def _saber(
    place: Placement,
    oracle: bool,
    trace: Sequence[TraceRequest],
    engines: list[Engine],
    tasks: Mapping[str, TaskType],
    fits: Sequence[ReplicaFit],
) -> ClusterResult:
    """One gateway over the pool, placing by ``place``; ``oracle``: it trusts max_tokens."""
    pool = _pool(place, tasks, fits)
    return simulate_cluster(trace, engines, tasks=tasks, pool=pool, trust_max_tokens=oracle)


def _saber_gateways(
    count: int,
    headroom: int | None,
    scrape_s: float,
    oracle: bool,
    trace: Sequence[TraceRequest],
    engines: list[Engine],
    tasks: Mapping[str, TaskType],
    fits: Sequence[ReplicaFit],
) -> ClusterResult:
    """``count`` gateways, each a pool as ``saber`` builds one, scraping every
    ``scrape_s``; ``headroom`` None derives it from the number of gateways."""
    pools = [_pool("chance", tasks, fits, 1.0 / count) for _ in range(count)]
    return simulate_cluster(
        trace,
        engines,
        tasks=tasks,
        gateways=pools,
        scrape_s=scrape_s,
        headroom=headroom,
        trust_max_tokens=oracle,
    )


SABER = "saber"
"""The gateway over the pool: admission, and placement by the chance of meeting the
deadline. ``saber+<placement>``: the same admission behind a router's placement."""
NO_HEADROOM = "no-headroom"


def gateway_policies(gateways: Sequence[int]) -> list[str]:
    """The names of the multi-gateway policies for these numbers of gateways:
    ``saber xM`` for each M > 1, and ``saber x2 no-headroom`` when 2 is among them."""
    out = []
    for m in dict.fromkeys(gateways):
        if m > 1:
            out.append(f"{SABER} x{m}")
        if m == 2:
            out.append(f"{SABER} x2 {NO_HEADROOM}")
    return out


def policies(
    gateways: Sequence[int] = (1,),
    scrape_s: float = SCRAPE_S,
    headroom: int | None = None,
    oracle: bool = False,
) -> dict[str, ServeFn]:
    """Every way the bench serves a trace on the pool, by name: vLLM alone behind each
    router of ``saber.sim.ROUTERS``; the gateway's admission over the pool, placing by
    chance (``saber``) or as a router would (``saber+round-robin``, ``saber+least-loaded``);
    and for each M > 1 in ``gateways``, M such gateways in front of it (``gateway_policies``),
    scraping every ``scrape_s``, with ``headroom`` fixed (and so a budget) or derived;
    ``oracle``: the gateways trust max_tokens as the true length."""
    out: dict[str, ServeFn] = {name: functools.partial(_behind_router, name) for name in ROUTERS}
    out[SABER] = functools.partial(_saber, "chance", oracle)
    for place in PLACEMENTS:
        if place != "chance":
            out[f"{SABER}+{place}"] = functools.partial(_saber, place, oracle)
    for name in gateway_policies(gateways):
        count = int(name.split()[1][1:])
        kept = 0 if name.endswith(NO_HEADROOM) else headroom
        out[name] = functools.partial(_saber_gateways, count, kept, scrape_s, oracle)
    return out


def with_gateways(chosen: Sequence[str], gateways: Sequence[int]) -> tuple[str, ...]:
    """The policies a run serves: ``chosen``, then, when ``saber`` is among them, its
    multi-gateway variants for ``gateways`` that were not chosen by name already."""
    extra = gateway_policies(gateways) if SABER in chosen else []
    return tuple(dict.fromkeys([*chosen, *extra]))


def parse_pool(text: str) -> tuple[str, ...]:
    """``"2xa,1xb"`` (or ``"a,b"``) -> ``("a", "a", "b")``: one preset name per replica."""
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = re.fullmatch(r"(\d+)x(.+)", part)
        count, name = (int(match[1]), match[2].strip()) if match else (1, part)
        if count < 1:
            raise ValueError(f"{part!r}: a pool needs at least one replica of each preset")
        out += [name] * count
    if not out:
        raise ValueError("an empty pool")
    return tuple(out)


def describe_pool(pool: Sequence[str]) -> str:
    """``("a", "a", "b")`` -> ``"2x a + 1x b"``, in order of first appearance."""
    counts = {name: pool.count(name) for name in dict.fromkeys(pool)}
    return " + ".join(f"{n}x {name}" for name, n in counts.items())


@dataclass(frozen=True)
class ClusterBench:
    """What a run covers. ``pool`` names one preset per replica; trace seeds are
    ``seed_base`` + 0..seeds-1 (13000.., used by no other benchmark); ``gateways``: the
    numbers of gateways the ``saber xM`` policies model, scraping every ``scrape_s``."""

    pool: tuple[str, ...] = parse_pool(POOL)
    workloads: tuple[str, ...] = ("W1", "W2", "W3")
    multiples: tuple[float, ...] = MULTIPLES
    policies: tuple[str, ...] = tuple(policies())
    seeds: int = 3
    seed_base: int = 13000
    requests: int | None = None  # per trace; None: REQUESTS_PER_REPLICA per replica
    gateways: tuple[int, ...] = (1,)
    scrape_s: float = SCRAPE_S
    headroom: int | None = None  # the saber xM gateways': None derived, else fixed
    mode: Mode = "realistic"  # oracle: max_tokens is the true length, and trusted

    @property
    def trace_requests(self) -> int:
        """Requests per trace."""
        return self.requests if self.requests is not None else REQUESTS_PER_REPLICA * len(self.pool)

    def points(self, capacity: Mapping[str, float]) -> list[Point]:
        """Every trace; ``capacity[workload]`` is the pool's saturation rate."""
        return [
            Point(w, m, m * capacity[w], s)
            for w in self.workloads
            for m in self.multiples
            for s in range(self.seeds)
        ]


@dataclass(frozen=True)
class Point:
    """One trace: a workload at a multiple of the pool's capacity, one seed."""

    workload: str
    multiple: float
    rps: float
    seed: int  # 0..seeds-1


@dataclass(frozen=True)
class Served:
    """One policy's run of one trace: shares of its requests (0..1), and per replica;
    behind gateways, the most requests each replica held and the most of them some
    gateway did not count (the unseen overload)."""

    goodput: float
    refused: float
    task_goodput: dict[str, float]
    per_backend: tuple[int, ...]  # requests sent to each replica
    preemptions: int
    max_in_engine: tuple[int, ...] = ()
    max_unseen: tuple[int, ...] = ()


@dataclass(frozen=True)
class PointResult:
    point: Point
    runs: dict[str, Served]  # policy -> its run
    ceiling: float  # share of requests that meet their SLA alone on the pool's best replica


def met_alone(
    trace: Sequence[TraceRequest], preset: EnginePreset, tasks: Mapping[str, TaskType]
) -> list[bool]:
    """Whether each request of ``trace`` meets its SLA alone on an idle ``preset``."""
    return [record.met_sla for record in serve_alone(trace, preset, tasks).records]


def ceiling(
    trace: Sequence[TraceRequest],
    presets: Sequence[EnginePreset],
    tasks: Mapping[str, TaskType],
) -> float:
    """The share of ``trace`` that meets its SLA alone on an idle replica of one of
    ``presets``: no placement or admission over the pool meets more."""
    met = [False] * len(trace)
    for preset in presets:
        met = [a or b for a, b in zip(met, met_alone(trace, preset, tasks), strict=True)]
    return sum(met) / len(met) if met else 0.0


def fresh_engines(presets: Sequence[EnginePreset]) -> list[Engine]:
    """One idle engine per replica, each with vLLM's default ``max_num_seqs``."""
    return [Engine(p, max_num_seqs=VLLM_DEFAULT_MAX_NUM_SEQS) for p in presets]


@dataclass(frozen=True)
class ClusterRun:
    bench: ClusterBench
    rates: dict[str, dict[str, float]]  # preset -> workload -> vLLM alone's saturation
    capacity: dict[str, float]  # workload -> the pool's: the sum over its replicas
    results: list[PointResult]


def served(result: ClusterResult) -> Served:
    """A run scored as the bench scores every run (``saber.bench._runner.summarize``)."""
    stats = summarize(result)
    unseen = [g.max_unseen for g in result.gateways]
    return Served(
        stats.goodput,
        stats.refused,
        dict(stats.task_goodput),
        tuple(b.served for b in result.backends),
        result.preemptions,
        tuple(b.max_in_engine for b in result.backends),
        tuple(max(col) for col in zip(*unseen, strict=True)) if unseen else (),
    )


def replica_fit(
    preset: EnginePreset, workloads: Mapping[str, Workload], tasks: Mapping[str, TaskType]
) -> ReplicaFit:
    """The profile saber-profile would fit on a replica of ``preset`` (on the
    ``PROFILE_WORKLOAD`` mix, as in the matrix)."""
    models, ttft = engine_profiles(preset, workloads[PROFILE_WORKLOAD], tasks, ["usl"])
    return ReplicaFit(models["usl"], ttft)


def replica_rate(preset: EnginePreset, workload: Workload, tasks: Mapping[str, TaskType]) -> float:
    """The rate (requests/s) at which vLLM alone saturates a replica of ``preset``."""
    return saturation_rate(preset, workload, tasks, max_num_seqs=VLLM_DEFAULT_MAX_NUM_SEQS)


@dataclass(frozen=True)
class _Shared:
    """What every task needs: sent once to each worker process."""

    bench: ClusterBench
    presets: Mapping[str, EnginePreset]
    tasks: Mapping[str, TaskType]
    workloads: Mapping[str, Workload]
    fits: Mapping[str, ReplicaFit] = dataclasses.field(default_factory=dict)

    def fit(self, preset: str) -> ReplicaFit:
        return replica_fit(self.presets[preset], self.workloads, self.tasks)

    def rate(self, key: tuple[str, str]) -> float:
        preset, workload = key
        return replica_rate(self.presets[preset], self.workloads[workload], self.tasks)

    def run(self, point: Point) -> PointResult:
        bench = self.bench
        trace = generate_trace(
            self.workloads[point.workload],
            self.tasks,
            rps=point.rps,
            n=bench.trace_requests,
            seed=bench.seed_base + point.seed,
            mode=bench.mode,
        )
        serve = policies(bench.gateways, bench.scrape_s, bench.headroom, bench.mode == "oracle")
        runs = {}
        for name in bench.policies:
            engines = fresh_engines([self.presets[p] for p in bench.pool])
            fits = [self.fits[p] for p in bench.pool] if self.fits else []
            runs[name] = served(serve[name](trace, engines, self.tasks, fits))
        distinct = [self.presets[p] for p in dict.fromkeys(bench.pool)]
        return PointResult(point, runs, ceiling(trace, distinct, self.tasks))


def run_cluster(
    bench: ClusterBench,
    presets: Mapping[str, EnginePreset],
    tasks: Mapping[str, TaskType],
    workloads: Mapping[str, Workload],
    *,
    jobs: int | None = None,
    progress: bool = True,
) -> ClusterRun:
    """Measure each distinct replica's saturation rate on each workload (one task
    each), then serve every trace (one task each). ``presets`` maps each name of
    ``bench.pool`` to its EnginePreset."""
    shared = _Shared(bench, dict(presets), tasks, workloads)
    keys = [(p, w) for p in dict.fromkeys(bench.pool) for w in bench.workloads]
    measured = parallel_map(
        _Shared.rate, shared, keys, description="measuring replicas", jobs=jobs, progress=progress
    )
    rates: dict[str, dict[str, float]] = {}
    for (p, w), rate in zip(keys, measured, strict=True):
        rates.setdefault(p, {})[w] = rate
    capacity = {w: sum(rates[p][w] for p in bench.pool) for w in bench.workloads}
    if any(name.startswith(SABER) for name in bench.policies):
        distinct = list(dict.fromkeys(bench.pool))
        fitted = parallel_map(
            _Shared.fit, shared, distinct, description="profiling replicas", jobs=jobs,
            progress=progress,
        )  # fmt: skip
        shared = dataclasses.replace(shared, fits=dict(zip(distinct, fitted, strict=True)))
    results = parallel_map(
        _Shared.run,
        shared,
        bench.points(capacity),
        description="serving traces",
        jobs=jobs,
        progress=progress,
    )
    return ClusterRun(bench, rates, capacity, results)


def with_overrides(bench: ClusterBench, **values: Any) -> ClusterBench:
    """``bench`` with every value that is not None."""
    return dataclasses.replace(bench, **{k: v for k, v in values.items() if v is not None})
