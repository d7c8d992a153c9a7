"""Every metric the dashboard and the alert rules read exists in a real exposition:
the gateway's saber_* or saber-sim's vllm:* (vLLM's names), after serving requests."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from deploy_support import (
    DASHBOARD,
    RULES_YML,
    SYNTHETIC_SERIES,
    Stack,
    exposition_names,
    metric_names,
    template_query_metrics,
)


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'histogram_quantile(0.95, sum by (le, task) (rate(a_bucket{task=~"$task", '
            'le!="by (x)"}[5m])))',
            {"a_bucket"},
        ),
        (
            "sum(rate(vllm:generation_tokens_total[$__rate_interval])) "
            "/ on (job) group_left(instance) b offset 1h30m",
            {"vllm:generation_tokens_total", "b"},
        ),
        ('absent(up{job=~"vllm|saber-sim"})', {"up"}),
        ("x > bool 0 and without_y unless sum without (z) (w)", {"x", "without_y", "w"}),
        ("avg_over_time((m and on (job, instance) n > 0)[30m:30s])", {"m", "n"}),
        ("exp(abs(ln(1e-3))) > Inf", set()),
        ("topk(3, count by (le) (c)) * 60 > 0x1F", {"c"}),
    ],
)
def test_metric_names_reads_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_template_query_metrics() -> None:
    assert template_query_metrics("label_values(saber_requests_total, task)") == {
        "saber_requests_total"
    }
    assert template_query_metrics("label_values(task)") == set()


def _dashboard_queries() -> dict[str, set[str]]:
    dash: dict[str, Any] = json.loads(DASHBOARD.read_text())
    queries: dict[str, set[str]] = {}
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            queries[f"{panel['title']}: {target['expr']}"] = metric_names(target["expr"])
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            queries[f"variable {var['name']}: {query}"] = template_query_metrics(query)
    return queries


def _rule_queries() -> dict[str, set[str]]:
    rules = yaml.safe_load(RULES_YML.read_text())
    return {
        f"{r.get('alert') or r.get('record')}: {r['expr']}": metric_names(r["expr"])
        for g in rules["groups"]
        for r in g["rules"]
    }


@pytest.fixture(scope="module")
def exposed(stack: Stack) -> set[str]:
    return exposition_names(stack.gateway_metrics()) | exposition_names(stack.sim_metrics())


@pytest.mark.parametrize("queries", [_dashboard_queries, _rule_queries], ids=["dashboard", "rules"])
def test_every_metric_read_is_exposed(queries: Any, exposed: set[str]) -> None:
    found = queries()
    read = set().union(*found.values())
    unknown = {q: sorted(n - exposed - SYNTHETIC_SERIES) for q, n in found.items()}
    assert {q: n for q, n in unknown.items() if n} == {}
    assert [q for q, n in found.items() if not n] == []  # each query reads some metric
    assert len(read) >= 5  # the extraction found the metrics, not nothing


def test_dashboard_has_the_panels_operators_need() -> None:
    dash = json.loads(DASHBOARD.read_text())
    reads: dict[str, set[str]] = {}
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            reads.setdefault(panel["title"], set()).update(metric_names(target["expr"]))
    every = set().union(*reads.values())
    assert {
        "saber_sla_requests_total",  # goodput per task
        "saber_slo_requests_total",  # which part of the SLO is missed
        "saber_queue_depth",  # queues per task and tier
        "saber_admissions_total",
        "saber_demotions_total",
        "saber_requests_total",  # rejections
        "saber_requests_in_flight",
        "vllm:num_requests_running",  # next to the gateway's in-flight
        "saber_predicted_speed_tokens_per_second",
        "saber_request_speed_tokens_per_second_sum",  # observed speed
        "saber_time_to_first_token_seconds_bucket",  # TTFT percentiles
        "saber_request_duration_seconds_bucket",  # end-to-end percentiles
    } <= every
    in_flight = next(t for t, names in reads.items() if "saber_requests_in_flight" in names)
    assert "vllm:num_requests_running" in reads[in_flight]  # on the same panel
    uids = {t["datasource"]["uid"] for p in dash["panels"] for t in p.get("targets", [])}
    provisioned = yaml.safe_load(
        (DASHBOARD.parents[1] / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    assert uids == {d["uid"] for d in provisioned["datasources"]}
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
