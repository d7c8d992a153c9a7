"""deploy/k8s: every manifest valid against the Kubernetes schemas, the parts naming
each other rightly, and the gateway config the ConfigMap carries accepted by
``saber-gateway --check``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_support import DEPLOY
from kubernetes_validate.utils import all_versions

from saber.config import load_gateway_config
from saber.gateway.cli import main

K8S = DEPLOY / "k8s"
KUBERNETES = "1.30"
"""The Kubernetes minor version the manifests are checked against."""


def kustomization() -> dict[str, Any]:
    data = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert isinstance(data, dict)
    return data


def manifests() -> list[dict[str, Any]]:
    docs = []
    for name in kustomization()["resources"]:
        docs += [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    return docs


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in manifests() if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def config_file() -> Path:
    (generator,) = kustomization()["configMapGenerator"]
    (entry,) = generator["files"]
    key, _, path = entry.partition("=")
    assert key == "gateway.yaml"
    return K8S / path


def schema_version() -> str:
    """The newest schemas of KUBERNETES's minor version that the validator carries."""
    versions = [v for v in all_versions() if v.startswith(KUBERNETES + ".")]
    assert versions, f"kubernetes-validate carries no {KUBERNETES}.x schemas"
    return max(versions, key=lambda v: tuple(int(p) for p in v.split(".")))


@pytest.mark.parametrize(
    "doc",
    [d for d in manifests() if not d["apiVersion"].startswith("monitoring.coreos.com/")],
    ids=lambda d: f"{d['kind']}/{d['metadata']['name']}",
)
def test_every_manifest_validates_against_the_kubernetes_schemas(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, schema_version(), strict=True)


def test_the_service_monitor_scrapes_the_gateways_service() -> None:
    # A CRD of the Prometheus Operator: no schema ships with Kubernetes, so its
    # references are checked here instead.
    monitor = one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = one("Service", "saber-gateway")
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http"]
    assert "http" in ports and monitor["spec"]["endpoints"][0]["path"] == "/metrics"


def test_the_parts_name_each_other() -> None:
    gateway = one("Deployment", "saber-gateway")
    pods = gateway["spec"]["template"]["metadata"]["labels"]
    assert gateway["spec"]["replicas"] >= 2
    volumes = {v["name"]: v for v in gateway["spec"]["template"]["spec"]["volumes"]}
    (generator,) = kustomization()["configMapGenerator"]
    assert volumes["config"]["configMap"]["name"] == generator["name"]
    for kind, name in (("Service", "saber-gateway"), ("PodDisruptionBudget", "saber-gateway")):
        selector = one(kind, name)["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert selector.items() <= pods.items(), (kind, selector)
    hpa = one("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "saber-gateway",
    }
    assert hpa["spec"]["minReplicas"] >= one("PodDisruptionBudget")["spec"]["minAvailable"] + 1
    vllm = one("StatefulSet", "vllm")
    headless = one("Service", "vllm")
    assert headless["spec"]["clusterIP"] == "None"
    assert vllm["spec"]["serviceName"] == headless["metadata"]["name"]
    container = vllm["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"


def test_the_gateway_config_lists_every_vllm_replica_and_counts_every_gateway() -> None:
    cfg = load_gateway_config(config_file(), env={})
    vllm = one("StatefulSet", "vllm")
    service = vllm["spec"]["serviceName"]
    container = vllm["spec"]["template"]["spec"]["containers"][0]
    port = container["ports"][0]["containerPort"]
    replicas = vllm["spec"]["replicas"]
    assert [b.settings.url for b in cfg.backend_list()] == [
        f"http://vllm-{i}.{service}:{port}" for i in range(replicas)
    ]
    # Each gateway keeps headroom for the most gateways there can be.
    assert cfg.cluster.gateways == one("HorizontalPodAutoscaler")["spec"]["maxReplicas"]
    seqs = next(a for a in container["args"] if a.startswith("--max-num-seqs="))
    assert cfg.max_concurrency is not None
    assert cfg.max_concurrency <= int(seqs.split("=")[1])
    assert cfg.metrics_public  # the ServiceMonitor scrapes without a key


def test_the_configmaps_gateway_config_passes_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_file()), "--check"]) == 0
    assert "2 backends: vllm-0=http://vllm-0.vllm:8000" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_renders_it() -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(out) if d)
    assert kinds == sorted([*(d["kind"] for d in manifests()), "ConfigMap"])
    assert all(
        d["metadata"].get("namespace") == "saber"
        for d in yaml.safe_load_all(out)
        if d and d["kind"] != "Namespace"
    )
