"""Gauges read at scrape time from the parts they describe, so they can never drift.

Each collector is handed a narrow view of what it reads (a scheduler, a few
callables, a backend watch's public fields), never the gateway itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from saber.backend import BackendKind, BackendLoad
from saber.config import TaskType
from saber.scheduler import Scheduler, Tier


class BackendView(Protocol):
    """What the metrics read of the gateway's watch on its backend."""

    @property
    def kind(self) -> BackendKind: ...
    @property
    def version(self) -> str | None: ...
    @property
    def kind_source(self) -> str: ...
    @property
    def scrape_errors(self) -> int: ...
    def fresh_load(self) -> BackendLoad | None: ...


class SchedulerCollector(Collector):
    def __init__(self, scheduler: Callable[[], Scheduler | None], tasks: Iterable[str]) -> None:
        self._scheduler = scheduler
        self._tasks = tasks  # live: read at each scrape

    def describe(self) -> list[Metric]:
        return list(self._families(None))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self._scheduler())

    def _families(self, s: Scheduler | None) -> Iterator[Metric]:
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
        predicted = GaugeMetricFamily(
            "saber_predicted_speed_tokens_per_second",
            "Per-sequence speed f(L) the profile predicts at the current load (sequences) "
            "and at one more.",
            labels=["load"],
        )
        if s is not None:
            for task in self._tasks:
                for tier in Tier:
                    depth.add_metric([task, tier.value], s.queued(task, tier))
            load = s.load
            in_flight.add_metric([], load)
            predicted.add_metric(["current"], s.predicted_speed(max(load, 1)))
            predicted.add_metric(["next"], s.predicted_speed(load + 1))
        yield from (depth, in_flight, predicted)


class LearningCollector(Collector):
    """What the closed loop has learned, read at scrape time: the calibration, observed
    speed over the loaded profile's, and each task's expected answer length."""

    def __init__(
        self,
        scheduler: Scheduler,
        profile_ratio: Callable[[], float | None],
        tasks: Callable[[], Mapping[str, TaskType]],
    ) -> None:
        self._scheduler = scheduler
        self._profile_ratio = profile_ratio  # observed over the profile's speed
        self._tasks = tasks  # the task types in force

    def describe(self) -> list[Metric]:
        return list(self._families(with_samples=False))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(with_samples=True)

    def _families(self, *, with_samples: bool) -> Iterator[Metric]:
        calibration = GaugeMetricFamily(
            "saber_speed_calibration",
            "Observed over predicted speed of recent finished requests (moving average), "
            "by which f(L) is scaled when the policy calibrates; 1 after a swap.",
        )
        spread = GaugeMetricFamily(
            "saber_speed_spread",
            "How far one request's speed strays from the calibrated prediction: the standard "
            "deviation of its logarithm (0.1 is about 10%), learned from finished requests "
            "and starting from the profile's own error; the chance of finishing in time is "
            "computed with it.",
        )
        profile = GaugeMetricFamily(
            "saber_speed_observed_over_profile",
            "Median, over recent finished requests, of the speed they got over the speed "
            "the loaded profile predicts over the loads they ran at: far from 1, the profile "
            "no longer describes the engine. Absent until a request has finished.",
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
            sched = self._scheduler
            calibration.add_metric([], sched.calibration)
            spread.add_metric([], sched.speed_sigma)
            ratio = self._profile_ratio()
            if ratio is not None:
                profile.add_metric([], ratio)
            for task, summary in sched.lengths.summary().items():
                for stat in ("mean", "p50", "p90"):
                    lengths.add_metric([task, stat], summary[stat])
                seen.add_metric([task], summary["observed"])
            if not sched.lengths.learn:
                for name, task_type in self._tasks().items():
                    lengths.add_metric([name, "mean"], task_type.expected_tokens)
            yield calibration
            yield spread
            if ratio is not None:
                yield profile
            yield from (lengths, seen)
        else:
            yield from (calibration, spread, profile, lengths, seen)


class BackendCollector(Collector):
    """The backend's identity, and its load as last read from its /metrics.

    The two load gauges are absent until the first good read, and again while the
    last good read is older than the watch's ``stale_after`` (the backend's
    /metrics is failing): no value rather than an old one, never NaN.
    """

    def __init__(self, backend: BackendView) -> None:
        self._backend = backend

    def describe(self) -> list[Metric]:
        return list(self._families(with_samples=False))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(with_samples=True)

    def _families(self, *, with_samples: bool) -> Iterator[Metric]:
        b = self._backend
        info = GaugeMetricFamily(
            "saber_backend_info",
            "The backend's engine (kind) and version; source says whether the kind was "
            "configured, detected, or assumed (vllm) until detection succeeds.",
            labels=["kind", "version", "source"],
        )
        errors = CounterMetricFamily(
            "saber_backend_scrape_errors",
            "Failed reads of the backend's /metrics (unreachable, error status, no load series).",
        )
        running = GaugeMetricFamily(
            "saber_backend_requests_running",
            "Requests the backend says it is running, whoever sent them "
            "(vllm:num_requests_running, which counts each of a request's n choices and "
            "prompts, as saber_requests_in_flight does; llamacpp:requests_processing).",
        )
        waiting = GaugeMetricFamily(
            "saber_backend_requests_waiting",
            "Requests the backend says are waiting inside it, whoever sent them "
            "(vllm:num_requests_waiting, llamacpp:requests_deferred).",
        )
        if not with_samples:
            yield from (info, errors, running, waiting)
            return
        info.add_metric([b.kind.value, b.version or "", b.kind_source], 1.0)
        errors.add_metric([], float(b.scrape_errors))
        yield from (info, errors)
        load = b.fresh_load()
        if load is not None:
            running.add_metric([], load.running)
            waiting.add_metric([], load.waiting)
            yield from (running, waiting)
