"""The backend's own count of requests, read from its Prometheus ``/metrics``.

vLLM (and saber-sim, which copies it) exports ``vllm:num_requests_running`` and
``vllm:num_requests_waiting``, one series per ``model_name``/``engine`` label
set; llama.cpp's llama-server exports ``llamacpp:requests_processing`` and
``llamacpp:requests_deferred`` without labels, and only when started with
``--metrics`` (otherwise ``/metrics`` answers 501).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from saber.backend._http import error_detail, get
from saber.backend._kind import BackendError, BackendKind

LOAD_METRICS: dict[BackendKind, tuple[str, str]] = {
    BackendKind.VLLM: ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    BackendKind.SIM: ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    BackendKind.LLAMACPP: ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
}
"""The (running, waiting) sample names each engine exports."""


@dataclass(frozen=True)
class BackendLoad:
    """Requests the engine is running and holding back, whoever sent them."""

    running: float
    waiting: float


def parse_load(metrics_text: str, kind: BackendKind) -> BackendLoad:
    """Running and waiting requests from a Prometheus exposition, summed over label sets.

    ValueError if either series is absent, not a number, or the text does not parse.
    """
    names = LOAD_METRICS[kind]
    # Only the lines that can matter reach the (pure Python) parser: vLLM's
    # exposition carries tens of KB of histograms, and the gateway reads it every
    # second on the event loop that relays streams.
    lines = [line for line in metrics_text.splitlines() if names[0] in line or names[1] in line]
    sums: dict[str, float | None] = dict.fromkeys(names)
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            for sample in family.samples:
                if sample.name in sums:
                    sums[sample.name] = (sums[sample.name] or 0.0) + float(sample.value)
    except Exception as exc:  # the parser raises several types on bad input
        raise ValueError(f"not a Prometheus exposition: {exc}") from None
    missing = [name for name, value in sums.items() if value is None]
    if missing:
        raise ValueError(f"no {' or '.join(missing)} in the metrics of a {kind} backend")
    running, waiting = (sums[name] for name in names)
    assert running is not None and waiting is not None
    if not (math.isfinite(running) and math.isfinite(waiting)):
        raise ValueError(f"{names[0]}={running}, {names[1]}={waiting}: not finite")
    return BackendLoad(running=running, waiting=waiting)


async def fetch_load(client: httpx.AsyncClient, base_url: str, kind: BackendKind) -> BackendLoad:
    """Scrape ``base_url``/metrics; a BackendError says why when it cannot be had."""
    url = base_url.rstrip("/") + "/metrics"
    resp = await get(client, url)
    if resp.status_code != 200:
        raise BackendError(f"GET {url} answered {resp.status_code}: {error_detail(resp)}")
    try:
        return parse_load(resp.text, kind)
    except ValueError as exc:
        raise BackendError(f"GET {url}: {exc}") from None
