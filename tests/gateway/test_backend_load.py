"""The backend's own load, read from its /metrics: traffic that bypasses the
gateway shows, failed reads are counted, and a backend that is down at start-up
is identified when it comes up."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gateway_support import SIM_TIME_SCALE, UNCAPPED, GatewayFactory
from prometheus_client.parser import text_string_to_metric_families

from harness import wait_for
from saber import __version__
from saber.gateway import RunningGateway
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.scheduler import SchedRequest
from saber.sim.http import RunningSim, serve_in_thread

FAST_SCRAPES = {"backend.metrics_interval_s": 0.1}
LONG = {"prompt": "x", "max_tokens": 20_000, "ignore_eos": True, "stream": True}


def samples(gw: RunningGateway) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The gateway's /metrics, parsed: sample name -> [(labels, value)]."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(httpx.get(gw.url + "/metrics").text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(gw: RunningGateway, name: str) -> float | None:
    found = samples(gw).get(name)
    return None if found is None else sum(v for _, v in found)


def reads(gw: RunningGateway, name: str, expected: float | None, timeout: float = 5.0) -> None:
    """Wait until the gateway's metric ``name`` reads ``expected`` (None: absent); fails
    with the last value read."""
    wait_for(lambda: value(gw, name), lambda v: v == expected, timeout=timeout, describe=name)


def errors(gw: RunningGateway) -> float:
    return value(gw, "saber_backend_scrape_errors_total") or 0


@contextlib.contextmanager
def direct_streams(sim: RunningSim, n: int) -> Iterator[None]:
    """``n`` long streams sent straight to saber-sim, open until the block ends."""
    with httpx.Client(timeout=10) as client, contextlib.ExitStack() as stack:
        for _ in range(n):
            resp = stack.enter_context(
                client.stream(
                    "POST", sim.api_url + "/completions", json={"model": sim.model, **LONG}
                )
            )
            assert resp.status_code == 200
        yield


def test_traffic_that_bypasses_the_gateway_is_visible(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(sim.url, **FAST_SCRAPES, **UNCAPPED)
    reads(gw, "saber_backend_requests_running", 0)
    info = samples(gw)["saber_backend_info"]
    assert info == [({"kind": "sim", "version": __version__, "source": "detected"}, 1.0)]
    with direct_streams(sim, 5):
        reads(gw, "saber_backend_requests_running", 5)
        assert value(gw, "saber_requests_in_flight") == 0
        assert value(gw, "saber_backend_requests_waiting") == 0
        backend = httpx.get(gw.url + "/saber/status").json()["backend"]
        assert backend["running"] == 5 and backend["gateway_in_flight"] == 0
        assert backend["kind"] == "sim" and backend["url"] == sim.url
        assert 0 <= backend["scraped_age_s"] < 5.0 and backend["metrics_interval_s"] == 0.1
    reads(gw, "saber_backend_requests_running", 0)
    assert value(gw, "saber_backend_scrape_errors_total") == 0


def test_the_gateways_own_requests_count_on_both_sides(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(sim.url, **FAST_SCRAPES, **UNCAPPED)
    with httpx.stream(
        "POST", gw.url + "/v1/completions", json={"model": sim.model, **LONG}, timeout=10
    ) as r:
        assert r.status_code == 200
        reads(gw, "saber_backend_requests_running", 1)
        assert value(gw, "saber_requests_in_flight") == 1
    reads(gw, "saber_backend_requests_running", 0)
    wait_for(lambda: gw.gateway.scheduler.load, lambda n: n == 0, describe="the scheduler's load 0")


def test_min_tokens_raise_the_expected_tokens(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(sim.url, trace=True)
    body = {"model": sim.model, "prompt": "x", "max_tokens": 250, "min_tokens": 200}
    resp = httpx.post(
        gw.url + "/v1/completions", json=body, headers={"x-saber-task": "code_qna"}, timeout=10
    )
    assert resp.json()["usage"]["completion_tokens"] >= 200  # the engine honours it
    trace = gw.gateway.admission.trace or []
    offers = [e.arg for e in trace if e.call == "offer" and isinstance(e.arg, SchedRequest)]
    assert [r.tokens for r in offers] == [200]  # not code_qna's 43


def test_without_polling_the_load_gauges_are_absent(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(sim.url, **{"backend.metrics_interval_s": 0})
    found = samples(gw)
    assert "saber_backend_requests_running" not in found
    assert "saber_backend_requests_waiting" not in found
    assert found["saber_backend_scrape_errors_total"] == [({}, 0.0)]
    assert found["saber_backend_info"][0][0]["kind"] == "sim"
    backend = httpx.get(gw.url + "/saber/status").json()["backend"]
    assert backend["running"] is None and backend["scraped_age_s"] is None
    assert backend["metrics_interval_s"] is None


def test_failed_reads_are_counted_and_stale_values_dropped(
    gateway_factory: GatewayFactory,
) -> None:
    with serve_in_thread(time_scale=20.0) as own:
        gw = gateway_factory(own.url, **FAST_SCRAPES)
        reads(gw, "saber_backend_requests_running", 0)
        gw.gateway.backend.stale_after = 0.5
        resp = httpx.post(own.url + "/sim/faults", json={"refuse_for": 4.0})
        assert resp.status_code == 200
        wait_for(lambda: errors(gw), lambda n: n >= 3, describe="3 failed reads")
        reads(gw, "saber_backend_requests_running", None)
        backend = httpx.get(gw.url + "/saber/status").json()["backend"]
        assert own.url + "/metrics" in backend["last_scrape_error"]
        assert backend["running"] == 0 and backend["scraped_age_s"] > 0.5  # the last read
        # The backend comes back, and so do the gauges.
        reads(gw, "saber_backend_requests_running", 0, timeout=12)
        assert httpx.get(gw.url + "/saber/status").json()["backend"]["last_scrape_error"] is None


def test_a_backend_down_at_start_is_identified_when_it_comes_up(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=GATEWAY_LOGGER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gw = gateway_factory(f"http://127.0.0.1:{port}", **FAST_SCRAPES)
    assert any("cannot identify the backend yet" in r.getMessage() for r in caplog.records)
    info = samples(gw)["saber_backend_info"]
    assert info == [({"kind": "vllm", "version": "", "source": "assumed"}, 1.0)]
    wait_for(lambda: errors(gw), lambda n: n >= 1, describe="a failed read")
    # Meanwhile it is served as vLLM: requests get the backend's absence as an answer.
    resp = httpx.post(gw.url + "/v1/completions", json={"model": "m", "prompt": "x"})
    assert resp.status_code == 503
    with serve_in_thread(time_scale=20.0, port=port) as late:
        # Identified, then logged: wait for the log record. Retries back off: 1, 2, 4, 8 s.
        found = wait_for(
            lambda: [r for r in caplog.records if r.getMessage() == "backend identified"],
            timeout=20,
            describe=lambda: f"the backend identified (info: {samples(gw)['saber_backend_info']})",
        )
        assert [r.__dict__["backend_kind"] for r in found] == ["sim"]
        labels: dict[str, Any] = samples(gw)["saber_backend_info"][0][0]
        assert (labels["kind"], labels["source"]) == ("sim", "detected")
        reads(gw, "saber_backend_requests_running", 0)
        resp = httpx.post(
            gw.url + "/v1/completions", json={"model": late.model, "prompt": "x", "max_tokens": 3}
        )
        assert resp.status_code == 200


def test_the_gateway_stops_at_once_while_its_backend_is_down(
    gateway_factory: GatewayFactory,
) -> None:
    """Stopping cancels the watch's reads of /metrics. On Python 3.11 (the Docker
    image's), asyncio.wait_for around a read drops a cancellation that lands as the read
    ends: with the backend gone and reads every 0.1 s the read loop went on, and the
    gateway's shutdown waited for it for good (SIGTERM too: still running 15 s later)."""
    with serve_in_thread(time_scale=SIM_TIME_SCALE) as sim:
        gw = gateway_factory(sim.url, **FAST_SCRAPES, **UNCAPPED)
        wait_for(lambda: value(gw, "saber_backend_requests_running"), lambda v: v is not None)
    wait_for(lambda: value(gw, "saber_backend_scrape_errors_total"), lambda v: v and v >= 2)
    gw.stop(timeout=5)
    assert not gw.thread.is_alive(), "the gateway still runs 5 s after it was told to stop"
