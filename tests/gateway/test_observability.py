"""/metrics parses and carries every family; one JSON log line per request."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from gateway_support import GatewayFactory
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from saber.gateway import Outcome, RunningGateway
from saber.gateway.errors import STATUS
from saber.gateway.observe.logs import REQUEST_LOGGER, JsonFormatter
from saber.scheduler import Outcome as SchedOutcome
from saber.sim.http import RunningSim

FAMILIES = {
    # name (as the parser reports it): type
    "saber_requests": "counter",
    "saber_queue_depth": "gauge",
    "saber_queue_wait_seconds": "histogram",
    "saber_time_to_first_token_seconds": "histogram",
    "saber_request_duration_seconds": "histogram",
    "saber_sla_requests": "counter",
    "saber_admissions": "counter",
    "saber_demotions": "counter",
    "saber_requests_in_flight": "gauge",
    "saber_predicted_speed_tokens_per_second": "gauge",
    "saber_request_speed_tokens_per_second": "histogram",
    "saber_generated_tokens": "counter",
    "saber_backend_errors": "counter",
    "saber_backend_info": "gauge",
    "saber_backend_forward_priority": "gauge",
    "saber_backend_scrape_errors": "counter",
    "saber_backend_in_flight": "gauge",
    "saber_backend_first_token_wait_seconds": "gauge",
    "saber_backend_up": "gauge",
    "saber_backend_ejections": "counter",
    "saber_speed_observed_over_predicted": "histogram",
    "saber_speed_refits": "counter",
    "saber_retry_after_observed_over_predicted": "histogram",
    "saber_passthrough_requests": "counter",
    "saber_passthrough_duration_seconds": "histogram",
    "saber_passthrough_in_flight": "gauge",
    "saber_passthrough_waiting": "gauge",
    "saber_speed_refit_departure_ratio": "gauge",
    "saber_speed_calibration": "gauge",
    "saber_speed_spread": "gauge",
    "saber_expected_output_tokens": "gauge",
    "saber_learned_lengths_observations": "counter",
    # saber_backend_requests_running/_waiting appear once the backend's /metrics
    # has been read: test_backend_load.py
}


def test_metrics_parse_and_carry_every_family(gateway: RunningGateway, sim: RunningSim) -> None:
    client = OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
    list(client.completions.create(model=sim.model, prompt="x", max_tokens=4, stream=True))
    client.chat.completions.create(
        model=sim.model, messages=[{"role": "user", "content": "x"}], max_tokens=4
    )
    resp = httpx.get(gateway.url + "/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(resp.text)}
    assert {name: families[name].type for name in FAMILIES if name in families} == FAMILIES
    assert all(name.startswith("saber_") for name in families)
    # Issue 48: no _created series, which were half of the 961 lines.
    created = [s.name for f in families.values() for s in f.samples if s.name.endswith("_created")]
    assert not created and "_created" not in resp.text
    assert (
        families["saber_requests"].samples and families["saber_time_to_first_token_seconds"].samples
    )
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    assert samples[("saber_time_to_first_token_seconds_count", (("task", "code_completion"),))] == 1
    generation = (("sla", "within"), ("sla_kind", "e2e"), ("task", "code_generation"))
    assert samples[("saber_sla_requests_total", generation)] == 1
    # code_completion has a TTFT SLA: judged on its first token, and labelled so, which
    # makes TTFT goodput a query of its own: saber_sla_requests_total{sla_kind="ttft"}.
    completion = {
        labels: value
        for (name, labels), value in samples.items()
        if name == "saber_sla_requests_total" and ("task", "code_completion") in labels
    }
    assert set(completion) == {
        (("sla", verdict), ("sla_kind", "ttft"), ("task", "code_completion"))
        for verdict in ("within", "outside")
    }
    assert sum(completion.values()) == 1
    assert samples[("saber_admissions_total", (("task", "code_completion"), ("tier", "high")))] == 1
    assert samples[("saber_queue_depth", (("task", "code_qna"), ("tier", "low")))] == 0
    # The profile's f(1) = 600, scaled by what the two finished requests taught.
    calibration = samples[("saber_speed_calibration", ())]
    assert 0 < calibration != 1.0
    assert 0 < samples[("saber_speed_spread", ())] <= 1.0
    assert samples[
        ("saber_predicted_speed_tokens_per_second", (("load", "next"),))
    ] == pytest.approx(600.0 * calibration)
    assert samples[("saber_speed_observed_over_predicted_count", ())] == 2
    learned = ("saber_learned_lengths_observations_total", (("task", "code_generation"),))
    assert samples[learned] == 1
    assert samples[("saber_speed_refits_total", (("result", "swapped"),))] == 0
    outcomes = {
        dict(labels)["outcome"] for name, labels in samples if name == "saber_requests_total"
    }
    assert outcomes == {o.value for o in Outcome}


def test_outcomes_cover_the_schedulers_and_each_has_a_status() -> None:
    assert {o.value for o in SchedOutcome} <= {o.value for o in Outcome}
    assert set(STATUS) == set(Outcome)


def test_one_json_log_line_per_request(
    gateway_factory: GatewayFactory, sim: RunningSim, caplog: pytest.LogCaptureFixture
) -> None:
    gw = gateway_factory(sim.url, log_requests=True)
    with caplog.at_level(logging.INFO, logger=REQUEST_LOGGER):
        httpx.post(
            gw.url + "/v1/completions",
            json={"model": sim.model, "prompt": "x", "max_tokens": 6},
            headers={"x-saber-task": "code_summary"},
        )
        httpx.post(gw.url + "/v1/completions", content=b"{bad")
    records = [r for r in caplog.records if r.name == REQUEST_LOGGER]
    assert len(records) == 2
    lines = [json.loads(JsonFormatter().format(r)) for r in records]
    ok, bad = lines
    assert ok["task"] == "code_summary" and ok["task_via"] == "header"
    assert ok["outcome"] == "served" and ok["status"] == 200 and ok["tokens"] == 6
    assert ok["queue_ms"] >= 0 and ok["latency_ms"] > 0 and ok["sla_met"] is True
    assert bad["outcome"] == "invalid_request" and bad["status"] == 400


def test_protection_setting_reaches_the_scheduler(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(
        sim.url, protection="frozen", lpq="paper", late_value=0.2, future_weight=0.25
    )
    assert gw.gateway.scheduler.policy.protection == "frozen"
    assert gw.gateway.scheduler.policy.lpq == "paper"
    assert gw.gateway.scheduler.policy.late_value == 0.2
    assert gw.gateway.scheduler.policy.future_weight == 0.25
    assert gw.gateway.scheduler.policy.order == "deadline"  # the rest: the default's
    policy = httpx.get(gw.url + "/saber/status").json()["policy"]
    assert policy["protection"] == "frozen" and policy["lpq"] == "paper"
    client = OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
    done = client.completions.create(model=sim.model, prompt="x", max_tokens=5)
    assert done.usage is not None and done.usage.completion_tokens == 5
