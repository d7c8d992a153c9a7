"""Prometheus metrics, in a private registry per app.

Names follow Prometheus conventions: a ``saber_`` prefix, base units in the
name (seconds, tokens per second), ``_total`` on counters. Gauges that mirror
the scheduler's state are read at scrape time, so they can never drift. /metrics
serves them without the ``_created`` series prometheus_client adds to every counter
and histogram (``exposition``): half the lines, and nothing a dashboard reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

from saber.config import PARTS, Part, TaskType
from saber.gateway.observe.collectors import (
    BackendCollector,
    LearningCollector,
    Replicas,
    SchedulerCollector,
)
from saber.scheduler import Action, Decision, Outcome, Pool, Tier


class GateView(Protocol):
    """What the metrics read of the pass-through routes' gate."""

    @property
    def in_flight(self) -> int: ...
    @property
    def waiting(self) -> int: ...


BACKEND_ERROR_KINDS = (
    "connect",
    "timeout",
    "reset",
    "status_4xx",
    "status_5xx",
    "stream_broken",
    "stream_timeout",
    "stream_error",
    "bad_response",
)

_SECONDS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    8.0,
    12.0,
    20.0,
    30.0,
    60.0,
    120.0,
)
_SPEED = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000, 2000, 5000)
_RATIO = (0.25, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 2.5, 4.0)


@dataclass(frozen=True, slots=True)
class TaskSeries:
    """One task type's series (prometheus_client children)."""

    outcomes: dict[Outcome, Any]
    admissions: dict[Tier, Any]
    sla_within: Any
    sla_outside: Any
    slo_parts: dict[tuple[Part, bool], Any]  # (part, met) -> saber_slo_requests_total
    queue_wait: Any
    ttft: Any
    latency: Any
    speed: Any
    demotions: Any
    tokens: Any
    overruns: Any


class _WithoutCreated:
    """A registry's metrics without their ``_created`` samples (the time each series was
    created). ``prometheus_client.disable_created_metrics`` would drop them for every
    registry of the process, saber-sim's too where it shares one (the demo, the tests)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        for family in self.registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


class GatewayMetrics:
    """Every metric the gateway exports; ``exposition`` is what /metrics serves."""

    def exposition(self) -> bytes:
        """The text /metrics serves: every series but the ``_created`` ones."""
        return generate_latest(_WithoutCreated(self.registry))

    def __init__(self, tasks: Mapping[str, TaskType], backends: Sequence[str] = ()) -> None:
        """``backends``: their names; of several, series about one carry its name."""
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "saber_requests",
            "Requests by task type and how they left the gateway (a request counts once, "
            "whatever its sequences).",
            ["task", "outcome"],
            registry=r,
        )
        self.queue_wait = _per_task(
            r,
            Histogram,
            "saber_queue_wait_seconds",
            "Time from arrival to admission (or leaving the queue).",
            buckets=_SECONDS,
        )
        self.ttft = _per_task(
            r,
            Histogram,
            "saber_time_to_first_token_seconds",
            "Time from arrival to the first generated token (streams).",
            buckets=_SECONDS,
        )
        self.latency = _per_task(
            r,
            Histogram,
            "saber_request_duration_seconds",
            "End-to-end latency of served requests, queueing included.",
            buckets=_SECONDS,
        )
        self.sla = Counter(
            "saber_sla_requests",
            "Served requests within or outside their SLO: within when they meet every part "
            "stated (vLLM's goodput rule); sla_kind names the primary part, e2e or ttft.",
            ["task", "sla", "sla_kind"],
            registry=r,
        )
        self.slo = Counter(
            "saber_slo_requests",
            "Served requests by each part of their SLO they state (ttft: first token; tpot: "
            "mean time per token after the first; e2e: the whole answer), met or not.",
            ["task", "part", "met"],
            registry=r,
        )
        self.admissions = Counter(
            "saber_admissions",
            "Requests admitted to the backend, by the queue tier they left (a request counts "
            "once, whatever its sequences).",
            ["task", "tier"],
            registry=r,
        )
        self.demotions = _per_task(
            r,
            Counter,
            "saber_demotions",
            "Requests demoted to the low-priority queue (deadline out of reach).",
        )
        self.speed = _per_task(
            r,
            Histogram,
            "saber_request_speed_tokens_per_second",
            "Observed per-sequence generation speed: a request's tokens / its sequences / "
            "time since admission (what f(L) predicts).",
            buckets=_SPEED,
        )
        self.tokens = _per_task(
            r,
            Counter,
            "saber_generated_tokens",
            "Tokens generated for clients (every sequence of a request).",
        )
        self.overruns = _per_task(
            r,
            Counter,
            "saber_task_overrun",
            "Requests that generated more tokens than their task type's max_tokens for each "
            "of their sequences.",
        )
        self.key_requests = Counter(
            "saber_key_requests",
            "Requests by the name of the API key they carried (configured names only), "
            "and how they left.",
            ["key", "outcome"],
            registry=r,
        )
        self.connections_refused = _counter_of(
            r,
            "saber_connections_refused",
            "Client connections closed by the gateway before a request: over "
            "max_client_connections (limit, answered 503) or headers not in within "
            "header_timeout_s (header_timeout, answered 408).",
            "reason",
            ("limit", "header_timeout"),
        )
        self.auth_failures = Counter(
            "saber_auth_failures",
            "Requests to routes other than the completions refused for want of a valid key "
            "(the completions count as outcome unauthorized).",
            registry=r,
        )
        self.reloads = _counter_of(
            r,
            "saber_config_reloads",
            "Reloads of the config and the profile (SIGHUP or a change of the files): "
            "applied, or refused (the file was bad; the old settings stay).",
            "result",
            ("applied", "refused"),
        )
        self._several = len(backends) > 1
        self.backend_errors = Counter(
            "saber_backend_errors",
            "Backend failures by kind (and backend, of several).",
            ["kind", "backend"] if self._several else ["kind"],
            registry=r,
        )
        for kind in BACKEND_ERROR_KINDS:
            for name in backends if self._several else [None]:
                self._backend_errors(kind, name)
        self.speed_ratio = Histogram(
            "saber_speed_observed_over_predicted",
            "Per finished request: the speed it got over the speed f(L) (calibrated) "
            "predicted for it, averaged over the loads it ran at.",
            buckets=_RATIO,
            registry=r,
        )
        self.retry_after = Histogram(
            "saber_retry_after_observed_over_predicted",
            "Per request turned away with a Retry-After: the time until a running request "
            "really freed its slot (its task's queue full: until a request of that task "
            "left the queue), over the time predicted. The prediction is the time by "
            "which that has happened with a chance of 0.8: about 80% of observations fall "
            "at or below 1.",
            buckets=(0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0),
            registry=r,
        )
        self.refits = Counter(
            "saber_speed_refits",
            "Online refits of f(L): swapped in (the engine had departed from the curve in "
            "use), kept, or unfit (the points could not support a fit).",
            ["result"],
            registry=r,
        )
        for result in ("swapped", "kept", "unfit"):
            self.refits.labels(result)
        self.departure = Gauge(
            "saber_speed_refit_departure_ratio",
            "How far the last refit's curve departed from the one in use (relative, worst "
            "over the loads seen).",
            registry=r,
        )
        self.passthrough = Counter(
            "saber_passthrough_requests",
            "Requests relayed on the backend's other routes (embeddings, tokenize, pooling, "
            "scoring, version), by route and the status answered (429: too many waited).",
            ["route", "status"],
            registry=r,
        )
        self.passthrough_duration = Histogram(
            "saber_passthrough_duration_seconds",
            "Time to answer a request of the backend's other routes, waiting included.",
            ["route"],
            buckets=_SECONDS,
            registry=r,
        )
        self._tasks: dict[str, TaskSeries] = {}
        for name, task in tasks.items():
            self.add_task(name, task.sla_kind)

    def add_task(self, task: str, sla_kind: str = "e2e") -> TaskSeries:
        """Create every series of a task at zero, so dashboards see it from the start.
        ``sla_kind`` labels saber_sla_requests_total (e2e for a task not configured)."""
        series = self._tasks.get(task)
        if series is None:
            series = self._tasks[task] = TaskSeries(
                outcomes={o: self.requests.labels(task, o.value) for o in Outcome},
                admissions={t: self.admissions.labels(task, t.value) for t in Tier},
                sla_within=self.sla.labels(task, "within", sla_kind),
                sla_outside=self.sla.labels(task, "outside", sla_kind),
                slo_parts={
                    (part, met): self.slo.labels(task, part, "true" if met else "false")
                    for part in PARTS
                    for met in (True, False)
                },
                queue_wait=self.queue_wait.labels(task),
                ttft=self.ttft.labels(task),
                latency=self.latency.labels(task),
                speed=self.speed.labels(task),
                demotions=self.demotions.labels(task),
                tokens=self.tokens.labels(task),
                overruns=self.overruns.labels(task),
            )
        return series

    def task(self, name: str) -> TaskSeries:
        """The task's series, looked up once: ``labels()`` is not free on a hot path."""
        return self._tasks.get(name) or self.add_task(name)

    def on_decision(self, d: Decision) -> None:
        """Counts admissions and demotions as the scheduler decides them."""
        if d.action is Action.ADMIT:
            self.task(d.request.task).admissions[d.tier].inc()
        elif d.action is Action.DEMOTE:
            self.task(d.request.task).demotions.inc()

    def on_slot_free(self, predicted_s: float, observed_s: float) -> None:
        """A Retry-After given ``observed_s`` ago, predicted as ``predicted_s``: a slot
        has just freed."""
        self.retry_after.observe(observed_s / max(predicted_s, 1e-3))

    def on_passthrough(self, route: str, status: int, seconds: float) -> None:
        """A request of a pass-through route was answered with ``status``."""
        self.passthrough.labels(route, str(status)).inc()
        self.passthrough_duration.labels(route).observe(seconds)

    def watch_passthrough(self, gate: GateView) -> None:
        """Export the pass-through routes' in-flight and waiting counts."""
        in_flight = Gauge(
            "saber_passthrough_in_flight",
            "Requests of the backend's other routes at the backend now.",
            registry=self.registry,
        )
        in_flight.set_function(lambda: gate.in_flight)
        waiting = Gauge(
            "saber_passthrough_waiting",
            "Requests of the backend's other routes waiting for a place "
            "(passthrough.max_concurrency).",
            registry=self.registry,
        )
        waiting.set_function(lambda: gate.waiting)

    def watch(self, pool: Callable[[], Pool | None], replicas: Replicas) -> None:
        """Export admission's live state (queues, load, each backend's predicted speed
        and whether it serves), for every task type with series (``add_task``, also on
        a reload)."""
        self.registry.register(SchedulerCollector(pool, replicas, self._tasks))

    def watch_connections(self, count: Callable[[], int]) -> None:
        """Export the number of open client connections (``connections``)."""
        gauge = Gauge(
            "saber_client_connections",
            "Client connections open (at most max_client_connections).",
            registry=self.registry,
        )
        gauge.set_function(count)

    def watch_learning(self, collector: LearningCollector) -> None:
        """Export what the closed loop has learned (calibration, lengths, the profile)."""
        self.registry.register(collector)

    def watch_backends(self, replicas: Replicas) -> None:
        """Export what the gateway knows of each backend (engine, its own load)."""
        self.registry.register(BackendCollector(replicas))

    def backend_error(self, kind: str, backend: str | None) -> None:
        """A backend failed a request (``BackendFailure.kind``)."""
        self._backend_errors(kind, backend).inc()

    def _backend_errors(self, kind: str, backend: str | None) -> Counter:
        if self._several:
            return self.backend_errors.labels(kind, backend or "")
        return self.backend_errors.labels(kind)


_Metric = TypeVar("_Metric", Counter, Histogram)


def _per_task(
    registry: CollectorRegistry, kind: type[_Metric], name: str, doc: str, **options: Any
) -> _Metric:
    """A counter or histogram labelled by task type alone."""
    return kind(name, doc, ["task"], registry=registry, **options)


def _counter_of(
    registry: CollectorRegistry, name: str, doc: str, label: str, values: Iterable[str]
) -> Counter:
    """A counter by one label, each of whose ``values`` is exported from the start at 0."""
    counter = Counter(name, doc, [label], registry=registry)
    for value in values:
        counter.labels(value)
    return counter
