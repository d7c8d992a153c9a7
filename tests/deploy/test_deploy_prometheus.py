"""Prometheus: the shipped config and rules are valid, the alerts fire when they should,
the gateway's real exposition passes promtool's lint, and a real Prometheus scrapes it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from deploy_support import (
    DASHBOARD,
    PROMETHEUS_YML,
    RULES_YML,
    Stack,
    find_tool,
)

from harness import free_port, wait_for, wait_until


def _promtool(
    promtool: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def test_prometheus_config_is_valid(promtool: str) -> None:
    done = _promtool(promtool, "check", "config", str(PROMETHEUS_YML))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rule files found" in done.stdout  # rules.yml is wired in


def test_rules_are_valid(promtool: str) -> None:
    # Also parses every annotation template.
    done = _promtool(promtool, "check", "rules", str(RULES_YML))
    assert done.returncode == 0, done.stdout + done.stderr


def test_gateway_exposition_passes_promtool_lint(promtool: str, stack: Stack) -> None:
    text = stack.gateway_metrics()
    assert "saber_requests_total{" in text
    done = _promtool(promtool, "check", "metrics", stdin=text)
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), (
        done.stdout + done.stderr
    )


# ---------------------------------------------------------------------------
# Alert behaviour: promtool's rule unit tests on synthetic series
# ---------------------------------------------------------------------------

GW = {"job": "saber-gateway", "instance": "gw"}


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    body = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{body}}}", "values": values}


ALERT_TESTS: list[dict[str, Any]] = [
    {  # goodput: code_qna 50% and code_summary 50% (rejections count) fire; others do not
        "interval": "1m",
        "input_series": [
            _series("saber_sla_requests_total", "0+30x40", task="code_qna", sla="within", **GW),
            _series("saber_requests_total", "0+60x40", task="code_qna", outcome="served", **GW),
            _series(
                "saber_sla_requests_total", "0+57x40", task="code_generation", sla="within", **GW
            ),
            _series(
                "saber_requests_total", "0+60x40", task="code_generation", outcome="served", **GW
            ),
            # Clients that cancel do not count against goodput.
            _series(
                "saber_requests_total", "0+600x40", task="code_generation",
                outcome="cancelled_running", **GW,
            ),
            _series(
                "saber_sla_requests_total", "0+60x40", task="code_summary", sla="within", **GW
            ),
            _series("saber_requests_total", "0+60x40", task="code_summary", outcome="served", **GW),
            _series(
                "saber_requests_total", "0+60x40", task="code_summary",
                outcome="rejected_queue_full", **GW,
            ),
            # Too little traffic to judge: 0% goodput but no alert.
            _series(
                "saber_requests_total", "0+0.3x40", task="code_translation", outcome="served",
                **GW,
            ),
        ],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "SaberGoodputLow", "exp_alerts": []},
            {
                "eval_time": "25m",
                "alertname": "SaberGoodputLow",
                "exp_alerts": [
                    {"exp_labels": {"severity": "warning", "task": "code_qna"}},
                    {"exp_labels": {"severity": "warning", "task": "code_summary"}},
                ],
            },
        ],
    },
    {  # LPQ: growing fires; steady, emptied within 10 min, or in the HPQ does not
        "interval": "1m",
        "input_series": [
            _series("saber_queue_depth", "1+1x30", task="code_generation", tier="low", **GW),
            _series("saber_queue_depth", "5x30", task="code_qna", tier="low", **GW),
            _series(
                "saber_queue_depth", "0 0 0 0 0 0 0 0 0 0 1+1x20", task="code_summary",
                tier="low", **GW,
            ),
            _series("saber_queue_depth", "1+1x30", task="code_completion", tier="high", **GW),
        ],
        "alert_rule_test": [
            {"eval_time": "3m", "alertname": "SaberLowPriorityQueueGrowing", "exp_alerts": []},
            {
                "eval_time": "20m",
                "alertname": "SaberLowPriorityQueueGrowing",
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": "warning",
                            "task": "code_generation",
                            "tier": "low",
                            **GW,
                        }
                    }
                ],
            },
        ],
    },
    {  # backend down (scrape fails) vs the gateway fine; no "missing" while one is found
        "interval": "1m",
        "input_series": [
            _series("up", "1 1 0 0 0 0 0 0 0 0", job="vllm", instance="vllm:8000"),
            _series("up", "1x10", **GW),
        ],
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "SaberBackendDown", "exp_alerts": []},
            {
                "eval_time": "5m",
                "alertname": "SaberBackendDown",
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": "critical",
                            "job": "vllm",
                            "instance": "vllm:8000",
                        }
                    }
                ],
            },
            {"eval_time": "9m", "alertname": "SaberBackendMissing", "exp_alerts": []},
            {"eval_time": "9m", "alertname": "SaberGatewayDown", "exp_alerts": []},
        ],
    },
    {  # no backend discovered at all; the sim counts as a backend
        "interval": "1m",
        "input_series": [
            _series("up", "0x10", **GW),
        ],
        "alert_rule_test": [
            {
                "eval_time": "8m",
                "alertname": "SaberBackendMissing",
                "exp_alerts": [{"exp_labels": {"severity": "critical"}}],
            },
            {
                "eval_time": "3m",
                "alertname": "SaberGatewayDown",
                "exp_alerts": [{"exp_labels": {"severity": "critical", **GW}}],
            },
        ],
    },
    {
        "interval": "1m",
        "input_series": [
            _series("up", "1x10", job="saber-sim", instance="saber-sim:8000"),
        ],
        "alert_rule_test": [
            {"eval_time": "8m", "alertname": "SaberBackendMissing", "exp_alerts": []},
        ],
    },
    {  # backend errors: 10% on gw fires, 1% on gw2 does not
        "interval": "1m",
        "input_series": [
            _series("saber_backend_errors_total", "0+6x20", kind="connect", **GW),
            _series("saber_requests_total", "0+60x20", task="code_qna", outcome="served", **GW),
            _series(
                "saber_backend_errors_total", "0+1x20", kind="status_5xx",
                job="saber-gateway", instance="gw2",
            ),
            _series(
                "saber_requests_total", "0+100x20", task="code_qna", outcome="served",
                job="saber-gateway", instance="gw2",
            ),
        ],
        "alert_rule_test": [
            {"eval_time": "3m", "alertname": "SaberBackendErrors", "exp_alerts": []},
            {
                "eval_time": "15m",
                "alertname": "SaberBackendErrors",
                "exp_alerts": [{"exp_labels": {"severity": "critical", **GW}}],
            },
        ],
    },
    {  # stale profile: 1.5x faster (gw) and 0.6x (gw2) fire; 1.1x (gw3) and a short dip do not
        "interval": "1m",
        "input_series": [
            _series("saber_speed_observed_over_profile", "1.5x40", **GW),
            _series("saber_speed_observed_over_profile", "0.6x40", job="saber-gateway",
                    instance="gw2"),
            _series("saber_speed_observed_over_profile", "1.1x40", job="saber-gateway",
                    instance="gw3"),
            _series("saber_speed_observed_over_profile", "1 1 1 0.5 0.5 0.5 0.5 0.5 1x30",
                    job="saber-gateway", instance="gw4"),
        ],
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": "SaberSpeedProfileStale", "exp_alerts": []},
            {
                "eval_time": "30m",
                "alertname": "SaberSpeedProfileStale",
                "exp_alerts": [
                    {"exp_labels": {"severity": "warning", **GW}},
                    {"exp_labels": {"severity": "warning", "job": "saber-gateway",
                                    "instance": "gw2"}},
                ],
            },
        ],
    },
]  # fmt: skip


def test_alerts_fire_when_they_should(promtool: str, tmp_path: Path) -> None:
    """promtool's unit tests of every alert, on rules.yml without its annotations (the
    text is checked by test_rules_are_valid; the expressions and `for` are tested here)."""
    rules = yaml.safe_load(RULES_YML.read_text())
    alerts = set()
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
            alerts.add(rule["alert"])
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    tested = {t["alertname"] for case in ALERT_TESTS for t in case["alert_rule_test"]}
    assert tested == alerts, "every alert needs a test case"
    suite = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": ALERT_TESTS}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(suite))
    done = _promtool(promtool, "test", "rules", str(tmp_path / "tests.yml"))
    assert done.returncode == 0, done.stdout + done.stderr


# ---------------------------------------------------------------------------
# A real Prometheus scraping the real gateway and saber-sim
# ---------------------------------------------------------------------------


@pytest.fixture
def prometheus(stack: Stack, tmp_path: Path) -> Iterator[str]:
    """Prometheus on 127.0.0.1 scraping the test's gateway and sim every second, with the
    shipped rules; killed at the end."""
    binary = find_tool("prometheus")
    if binary is None:
        pytest.skip("prometheus not on PATH (Debian: apt-get install prometheus)")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES_YML)],
        "scrape_configs": [
            {
                "job_name": "saber-gateway",
                "static_configs": [{"targets": [stack.gateway.url.removeprefix("http://")]}],
            },
            {
                "job_name": "vllm",
                "static_configs": [{"targets": [stack.sim.url.removeprefix("http://")]}],
            },
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        ready = wait_until(lambda: _ready(url) or proc.poll() is not None, 20, step=0.25)
        if not ready or proc.poll() is not None:
            pytest.fail("prometheus did not start:\n" + (tmp_path / "prometheus.log").read_text())
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _query(url: str, expr: str) -> list[dict[str, Any]]:
    r = httpx.get(url + "/api/v1/query", params={"query": expr}, timeout=10)
    body = r.json()
    assert body["status"] == "success", f"{expr}: {body.get('error')}"
    return list(body["data"]["result"])


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def test_prometheus_scrapes_the_gateway_and_runs_rules_and_panels(
    prometheus: str, stack: Stack
) -> None:
    url = prometheus
    # Two scrapes of each target, so that rate() over a minute has points.
    wait_for(
        lambda: [
            bool(_query(url, "count_over_time(saber_requests_in_flight[1m]) >= 2")),
            bool(_query(url, "count_over_time(vllm:num_requests_running[1m]) >= 2")),
        ],
        all,
        timeout=30,
        step=0.25,
        describe="two scrapes of the gateway and of the engine ([gateway, engine])",
    )
    served = _query(url, 'saber_requests_total{job="saber-gateway", outcome="served"}')
    assert sum(float(s["value"][1]) for s in served) >= 5  # what the fixture sent

    # Every shipped rule evaluated against real series, without an error.
    def evaluated() -> list[dict[str, Any]]:
        groups = httpx.get(url + "/api/v1/rules", timeout=10).json()["data"]["groups"]
        return [r for g in groups for r in g["rules"]]

    wait_for(
        lambda: {r["name"]: r["health"] for r in evaluated()},
        lambda health: "unknown" not in health.values(),
        timeout=15,
        step=0.25,
        describe="every rule evaluated (rule: health)",
    )
    rules = evaluated()
    assert {r["name"] for r in rules} >= {"SaberGoodputLow", "SaberSpeedProfileStale"}
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    # The backend is up: nothing says it is down or missing.
    firing = {a["labels"]["alertname"] for r in rules for a in r.get("alerts", [])}
    assert not firing & {"SaberBackendDown", "SaberBackendMissing", "SaberGatewayDown"}

    # Every dashboard query runs; those without a filter find series.
    for expr in _dashboard_exprs():
        concrete = expr.replace("$__rate_interval", "1m").replace("$task", ".*")
        result = _query(url, concrete)
        if " > " not in concrete:
            assert result, f"dashboard query finds no series: {expr}"
