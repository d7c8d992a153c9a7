"""Prometheus metrics under vLLM's names, in a registry private to one app.

Gauges are read from the engine at scrape time, so they are never stale. Times
are wall-clock seconds as a client sees them (at ``--time-scale`` above 1 they
are shorter than the engine model's). Every series carries vLLM's
``model_name`` and ``engine`` labels.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from saber.engine import Engine

# vLLM's buckets for these two histograms.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
    5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
LABELS = ("model_name", "engine")


class _EngineState(Collector):
    """The engine's live state as vLLM's gauges."""

    def __init__(self, engine: Engine, model_name: str) -> None:
        self._engine = engine
        self._labels = [model_name, "0"]

    def collect(self) -> Iterator[Metric]:
        e = self._engine
        for name, doc, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.",
             e.num_running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
             e.num_waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
             e.kv_usage),
        ):  # fmt: skip
            family = GaugeMetricFamily(name, doc, labels=LABELS)
            family.add_metric(self._labels, float(value))
            yield family
        preemptions = CounterMetricFamily(
            "vllm:num_preemptions", "Cumulative number of preemptions from the engine.",
            labels=LABELS,
        )  # fmt: skip
        preemptions.add_metric(self._labels, float(e.total_preemptions))
        yield preemptions


class SimMetrics:
    """The counters and histograms the routes update, and the scrape output."""

    def __init__(self, engine: Engine, model_name: str) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_EngineState(engine, model_name))
        labels = (model_name, "0")
        reg = self.registry

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=reg)

        self.prompt_tokens = counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed."
        ).labels(*labels)
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        ).labels(*labels)
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*LABELS, "finished_reason"],
            registry=reg,
        )
        self._labels = labels

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=reg)

        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        ).labels(*labels)
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            E2E_BUCKETS,
        ).labels(*labels)
        self.tpot = histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            TPOT_BUCKETS,
        ).labels(*labels)

    def first_token(self, prompt_tokens: int, ttft_s: float) -> None:
        self.prompt_tokens.inc(prompt_tokens)
        self.ttft.observe(ttft_s)

    def finished(self, reason: str, e2e_s: float, tokens: int, decode_s: float) -> None:
        self._success.labels(*self._labels, reason).inc()
        self.e2e.observe(e2e_s)
        if tokens > 1:
            self.tpot.observe(decode_s / (tokens - 1))

    def render(self) -> bytes:
        return generate_latest(self.registry)
