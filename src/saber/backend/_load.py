"""The backend's own count of requests, read from its Prometheus ``/metrics``.

vLLM (and saber-sim, which copies it) exports ``vllm:num_requests_running`` and
``vllm:num_requests_waiting``, one series per ``model_name``/``engine`` label
set; llama.cpp's llama-server exports ``llamacpp:requests_processing`` and
``llamacpp:requests_deferred`` without labels, and only when started with
``--metrics`` (otherwise ``/metrics`` answers 501). vLLM's histogram of time to first
token (``vllm:time_to_first_token_seconds``, kept as its ``_sum`` and ``_count``) says
how long the engine's requests, every client's, streamed or not, wait for a first
token; llama-server has none.
"""

from __future__ import annotations

import dataclasses
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

TTFT_METRICS: dict[BackendKind, tuple[str, str]] = {
    BackendKind.VLLM: (
        "vllm:time_to_first_token_seconds_sum",
        "vllm:time_to_first_token_seconds_count",
    ),
}
TTFT_METRICS[BackendKind.SIM] = TTFT_METRICS[BackendKind.VLLM]
"""The (sum, count) samples of the time-to-first-token histogram, where there is one."""


@dataclass(frozen=True)
class BackendLoad:
    """Requests the engine is running and holding back, whoever sent them."""

    running: float
    waiting: float
    ttft_sum: float | None = None  # seconds, over every first token since the start
    ttft_count: float | None = None  # None: the engine keeps no such histogram

    def ttft_since(self, earlier: BackendLoad | None) -> float | None:
        """Mean time to first token of the requests that made their first one between
        ``earlier`` and this read; None if none did, either read lacks the histogram,
        or the counters went back (the engine restarted)."""
        if earlier is None or earlier.ttft_count is None or earlier.ttft_sum is None:
            return None
        if self.ttft_count is None or self.ttft_sum is None:
            return None
        count, total = self.ttft_count - earlier.ttft_count, self.ttft_sum - earlier.ttft_sum
        return total / count if count > 0 and total >= 0 else None


def parse_load(metrics_text: str, kind: BackendKind) -> BackendLoad:
    """Running and waiting requests from a Prometheus exposition, summed over label
    sets, and the time-to-first-token histogram's sum and count where the engine has
    one (None where a vLLM does not export it yet).

    ValueError if either load series is absent, not a number, or the text does not
    parse.
    """
    names = LOAD_METRICS[kind]
    ttft = TTFT_METRICS.get(kind, ())
    wanted = names + ttft
    # Only the lines that can matter reach the (pure Python) parser: vLLM's
    # exposition carries tens of KB of histograms, and the gateway reads it every
    # second on the event loop that relays streams. Of the histogram only the _sum and
    # _count samples pass, parsed as untyped (their family's TYPE line does not).
    lines = [line for line in metrics_text.splitlines() if any(name in line for name in wanted)]
    sums: dict[str, float | None] = dict.fromkeys(wanted)
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            for sample in family.samples:
                if sample.name in sums:
                    sums[sample.name] = (sums[sample.name] or 0.0) + float(sample.value)
    except Exception as exc:  # the parser raises several types on bad input
        raise ValueError(f"not a Prometheus exposition: {exc}") from None
    missing = [name for name in names if sums[name] is None]
    if missing:
        raise ValueError(f"no {' or '.join(missing)} in the metrics of a {kind} backend")
    running, waiting = (sums[name] for name in names)
    assert running is not None and waiting is not None
    if not (math.isfinite(running) and math.isfinite(waiting)):
        raise ValueError(f"{names[0]}={running}, {names[1]}={waiting}: not finite")
    load = BackendLoad(running=running, waiting=waiting)
    if not ttft:
        return load
    total, count = sums[ttft[0]], sums[ttft[1]]
    if total is None or count is None or not (0 <= total < math.inf and 0 <= count < math.inf):
        return load  # a histogram not (yet) exported, or nonsense: no wait read from it
    return dataclasses.replace(load, ttft_sum=total, ttft_count=count)


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
