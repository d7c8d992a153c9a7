"""Gauges read at scrape time from the parts they describe, so they can never drift.

Each collector is handed a narrow view of what it reads (the admission pool, each
backend's scheduler and watch), never the gateway itself. A series about one backend
carries its name (``backend``) when there are several, and no such label when there
is one (the series of a single-backend gateway are as they always were); one about
the gateway as a whole sums its backends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from saber.backend import BackendKind, BackendLoad
from saber.config import TaskType
from saber.scheduler import Pool, Scheduler, Tier


class PriorityView(Protocol):
    """Whether the tier goes to a backend as its request priority, and why."""

    @property
    def forward(self) -> bool: ...
    @property
    def source(self) -> str: ...
    @property
    def policy(self) -> str | None: ...


class BackendView(Protocol):
    """What the metrics read of the gateway's watch on a backend."""

    @property
    def kind(self) -> BackendKind: ...
    @property
    def version(self) -> str | None: ...
    @property
    def kind_source(self) -> str: ...
    @property
    def scrape_errors(self) -> int: ...
    @property
    def priority(self) -> PriorityView: ...
    def fresh_load(self) -> BackendLoad | None: ...


class ReplicaView(Protocol):
    """What the metrics read of one backend the gateway serves."""

    @property
    def name(self) -> str: ...
    @property
    def scheduler(self) -> Scheduler: ...
    @property
    def watch(self) -> BackendView: ...
    @property
    def ejected(self) -> bool: ...
    @property
    def ejections(self) -> int: ...
    def profile_ratio(self) -> float | None: ...


Replicas = Callable[[], Sequence[ReplicaView]]


def named(replicas: Sequence[ReplicaView]) -> Callable[[ReplicaView], list[str]]:
    """A backend's ``backend`` label value, if backends are told apart (several)."""
    if len(replicas) > 1:
        return lambda r: [r.name]
    return lambda r: []


def by_backend(replicas: Sequence[ReplicaView], *labels: str) -> list[str]:
    return [*labels, "backend"] if len(replicas) > 1 else list(labels)


class SchedulerCollector(Collector):
    def __init__(
        self, pool: Callable[[], Pool | None], replicas: Replicas, tasks: Iterable[str]
    ) -> None:
        self._pool = pool
        self._replicas = replicas
        self._tasks = tasks  # live: read at each scrape

    def describe(self) -> list[Metric]:
        return list(self._families(None))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self._pool())

    def _families(self, s: Pool | None) -> Iterator[Metric]:
        replicas = self._replicas()
        label = named(replicas)
        depth = GaugeMetricFamily(
            "saber_queue_depth",
            "Requests waiting, by task type and queue tier (a request counts once, whatever "
            "its sequences).",
            labels=["task", "tier"],
        )
        in_flight = GaugeMetricFamily(
            "saber_requests_in_flight",
            "Sequences admitted and running at the backend, the load L: each request counts "
            "n (or best_of) x its prompts, as vLLM's num_requests_running does.",
        )
        placed = GaugeMetricFamily(
            "saber_backend_in_flight",
            "Sequences this gateway has running at each backend (saber_requests_in_flight "
            "is their sum).",
            labels=by_backend(replicas),
        )
        predicted = GaugeMetricFamily(
            "saber_predicted_speed_tokens_per_second",
            "Per-sequence speed f(L) each backend's profile predicts at its current load "
            "(sequences, its own and what it counts of other gateways') and at one more.",
            labels=by_backend(replicas, "load"),
        )
        first_wait = GaugeMetricFamily(
            "saber_backend_first_token_wait_seconds",
            "The last time to first token at each backend (a stream's, or the engine's "
            "mean between two reads of its /metrics, whichever is newer), 0 while the "
            "gateway runs nothing there: placement takes it off a request's time left, "
            "for the prefill that f(L) leaves out.",
            labels=by_backend(replicas),
        )
        up = GaugeMetricFamily(
            "saber_backend_up",
            "1 while the backend takes new requests, 0 while it is ejected (its circuit "
            "breaker is open after failures in a row, or its /metrics is stale with "
            "cluster.stale: closed).",
            labels=by_backend(replicas),
        )
        ejections = CounterMetricFamily(
            "saber_backend_ejections",
            "Times the backend was ejected after failing requests in a row.",
            labels=by_backend(replicas),
        )
        affinity = CounterMetricFamily(
            "saber_affinity",
            "Requests of a session (API key + cluster.affinity_header) placed on their "
            "session's backend (kept), or on another worth more than cluster.affinity_margin "
            "(broken); only with affinity on and several backends.",
            labels=["result"],
        )
        if s is None:
            yield affinity
        elif s.affinity_margin is not None and len(s.backends) > 1:
            affinity.add_metric(["kept"], s.affinity.kept)
            affinity.add_metric(["broken"], s.affinity.broken)
            yield affinity
        if s is not None:
            for task in self._tasks:
                for tier in Tier:
                    depth.add_metric([task, tier.value], s.queued(task, tier))
            in_flight.add_metric([], s.load)
            for r in replicas:
                b, name = r.scheduler, label(r)
                load = b.load
                placed.add_metric(name, load)
                predicted.add_metric(["current", *name], b.predicted_speed(max(load, 1)))
                predicted.add_metric(["next", *name], b.predicted_speed(load + 1))
                first_wait.add_metric(name, b.first_token_wait)
                up.add_metric(name, 0.0 if r.ejected else 1.0)
                ejections.add_metric(name, r.ejections)
        yield from (depth, in_flight, placed, predicted, first_wait, up, ejections)


class LearningCollector(Collector):
    """What the closed loop has learned, read at scrape time: the calibration, observed
    speed over the loaded profile's, and each task's expected answer length."""

    def __init__(self, replicas: Replicas, tasks: Callable[[], Mapping[str, TaskType]]) -> None:
        self._replicas = replicas
        self._tasks = tasks  # the task types in force

    def describe(self) -> list[Metric]:
        return list(self._families(with_samples=False))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(with_samples=True)

    def _families(self, *, with_samples: bool) -> Iterator[Metric]:
        replicas = self._replicas()
        label = named(replicas)
        calibration = GaugeMetricFamily(
            "saber_speed_calibration",
            "Observed over predicted speed of recent finished requests (moving average), "
            "by which f(L) is scaled when the policy calibrates; 1 after a swap.",
            labels=by_backend(replicas),
        )
        spread = GaugeMetricFamily(
            "saber_speed_spread",
            "How far one request's speed strays from the calibrated prediction: the standard "
            "deviation of its logarithm (0.1 is about 10%), learned from finished requests "
            "and starting from the profile's own error; the chance of finishing in time is "
            "computed with it.",
            labels=by_backend(replicas),
        )
        profile = GaugeMetricFamily(
            "saber_speed_observed_over_profile",
            "Median, over recent finished requests, of the speed they got over the speed "
            "the loaded profile predicts over the loads they ran at: far from 1, the profile "
            "no longer describes the engine. Absent until a request has finished.",
            labels=by_backend(replicas),
        )
        lengths = GaugeMetricFamily(
            "saber_expected_output_tokens",
            "What each task's answers are expected to be, learned from finished requests "
            "(mean, p50, p90), or configured when lengths are not learned.",
            labels=["task", "stat"],
        )
        seen = CounterMetricFamily(
            "saber_learned_lengths_observations",
            "Finished requests each task's expected length has learned from.",
            labels=["task"],
        )
        if with_samples:
            ratios = False
            for r in replicas:
                calibration.add_metric(label(r), r.scheduler.calibration)
                spread.add_metric(label(r), r.scheduler.speed_sigma)
                ratio = r.profile_ratio()
                if ratio is not None:
                    profile.add_metric(label(r), ratio)
                    ratios = True
            sched = replicas[0].scheduler  # the backends share the tasks' lengths
            for task, summary in sched.lengths.summary().items():
                for stat in ("mean", "p50", "p90"):
                    lengths.add_metric([task, stat], summary[stat])
                seen.add_metric([task], summary["observed"])
            if not sched.lengths.learn:
                for name, task_type in self._tasks().items():
                    lengths.add_metric([name, "mean"], task_type.expected_tokens)
            yield calibration
            yield spread
            if ratios:
                yield profile
            yield from (lengths, seen)
        else:
            yield from (calibration, spread, profile, lengths, seen)


class BackendCollector(Collector):
    """Each backend's identity, whether the tier goes to it as the request priority, and
    its load as last read from its /metrics.

    A backend's two load gauges are absent until the first good read, and again while
    the last good read is older than the watch's ``stale_after`` (the backend's
    /metrics is failing): no value rather than an old one, never NaN.
    """

    def __init__(self, replicas: Replicas) -> None:
        self._replicas = replicas

    def describe(self) -> list[Metric]:
        return list(self._families(with_samples=False))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(with_samples=True)

    def _families(self, *, with_samples: bool) -> Iterator[Metric]:
        replicas = self._replicas()
        label = named(replicas)
        info = GaugeMetricFamily(
            "saber_backend_info",
            "Each backend's engine (kind) and version; source says whether the kind was "
            "configured, detected, or assumed (vllm) until detection succeeds.",
            labels=by_backend(replicas, "kind", "version", "source"),
        )
        forward = GaugeMetricFamily(
            "saber_backend_forward_priority",
            "1 while the admission tier goes to the backend as the request's priority "
            "(backend.forward_priority), else 0. source: configured, detected (auto, and "
            "the engine said its scheduling policy; or llama.cpp, which has none) or "
            "unknown (auto, and the engine did not say); policy: fcfs or priority as the "
            "engine said, empty if not asked or not said.",
            labels=by_backend(replicas, "source", "policy"),
        )
        errors = CounterMetricFamily(
            "saber_backend_scrape_errors",
            "Failed reads of the backend's /metrics (unreachable, error status, no load series).",
            labels=by_backend(replicas),
        )
        running = GaugeMetricFamily(
            "saber_backend_requests_running",
            "Requests the backend says it is running, whoever sent them "
            "(vllm:num_requests_running, which counts each of a request's n choices and "
            "prompts, as saber_requests_in_flight does; llamacpp:requests_processing).",
            labels=by_backend(replicas),
        )
        waiting = GaugeMetricFamily(
            "saber_backend_requests_waiting",
            "Requests the backend says are waiting inside it, whoever sent them "
            "(vllm:num_requests_waiting, llamacpp:requests_deferred).",
            labels=by_backend(replicas),
        )
        if not with_samples:
            yield from (info, forward, errors, running, waiting)
            return
        loads = False
        for r in replicas:
            b = r.watch
            info.add_metric([b.kind.value, b.version or "", b.kind_source, *label(r)], 1.0)
            p = b.priority
            forward.add_metric([p.source, p.policy or "", *label(r)], float(p.forward))
            errors.add_metric(label(r), float(b.scrape_errors))
            load = b.fresh_load()
            if load is not None:
                running.add_metric(label(r), load.running)
                waiting.add_metric(label(r), load.waiting)
                loads = True
        yield from (info, forward, errors)
        if loads:
            yield from (running, waiting)
