"""deploy/compose.yaml (and the saber-sim override): what it runs, and that every file,
service name and port it refers to exists and agrees with the other files.

`docker compose config` validates the files against the compose schema where a compose
client is installed (Compose v2's plugin, or Debian's docker-compose, which needs no
engine for `config`); the structural checks below run everywhere."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from deploy_support import (
    DEPLOY,
    PROMETHEUS_YML,
    REPO,
    find_tool,
    interpolate,
    merge_compose,
)

BASE = DEPLOY / "compose.yaml"
SIM = DEPLOY / "compose.sim.yaml"


def _load(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


@pytest.fixture(scope="module")
def gpu() -> dict[str, Any]:
    return _load(BASE)


@pytest.fixture(scope="module")
def sim(gpu: dict[str, Any]) -> dict[str, Any]:
    return merge_compose(gpu, _load(SIM))


def _flags(service: dict[str, Any]) -> dict[str, str]:
    """--name=value arguments of a command list, defaults interpolated."""
    flags = {}
    for arg in service.get("command", []):
        name, sep, value = interpolate(arg).partition("=")
        if sep:
            flags[name] = value
    return flags


def _env(service: dict[str, Any]) -> dict[str, str]:
    return {k: interpolate(str(v)) for k, v in service.get("environment", {}).items()}


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source (a named volume, or a path relative to deploy/)."""
    out = {}
    for spec in service.get("volumes", []):
        source, target = interpolate(spec).split(":")[:2]
        out[target] = source
    return out


def _host_file(service: dict[str, Any], container_path: str) -> Path | None:
    """The file on the host behind a path inside the container, through bind mounts."""
    path = PurePosixPath(container_path)
    for target, source in _mounts(service).items():
        inside = path == PurePosixPath(target) or PurePosixPath(target) in path.parents
        if source.startswith(".") and inside:
            return (DEPLOY / source / path.relative_to(target)).resolve()
    return None


def _dockerfile(service: dict[str, Any]) -> Path:
    build = service["build"]
    return (DEPLOY / build["context"] / build.get("dockerfile", "Dockerfile")).resolve()


# ---------------------------------------------------------------------------


def test_gpu_stack_runs_vllm_the_gateway_prometheus_and_grafana(gpu: dict[str, Any]) -> None:
    s = gpu["services"]
    assert set(s) == {"vllm", "gateway", "prometheus", "grafana"}
    assert interpolate(s["vllm"]["image"]).startswith("vllm/vllm-openai:")
    assert interpolate(s["prometheus"]["image"]).startswith("prom/prometheus:")
    assert interpolate(s["grafana"]["image"]).startswith("grafana/grafana")
    assert _dockerfile(s["gateway"]) == REPO / "Dockerfile"


def test_vllm_has_a_gpu_model_and_max_num_seqs_as_variables(gpu: dict[str, Any]) -> None:
    vllm = gpu["services"]["vllm"]
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    raw = " ".join(vllm["command"])
    assert re.search(r"--model=\$\{VLLM_MODEL:-[^}]+\}", raw)
    assert re.search(r"--max-num-seqs=\$\{VLLM_MAX_NUM_SEQS:-\d+\}", raw)
    # the Hugging Face cache survives restarts in a named volume
    cache = _mounts(vllm)["/root/.cache/huggingface"]
    assert cache in gpu["volumes"]


def test_gateway_points_at_vllm_and_keeps_its_cap_at_max_num_seqs(gpu: dict[str, Any]) -> None:
    gateway, vllm = gpu["services"]["gateway"], gpu["services"]["vllm"]
    url = urlsplit(_env(gateway)["SABER_BACKEND_URL"])
    assert (url.hostname, str(url.port)) == ("vllm", _flags(vllm)["--port"])
    assert _env(gateway)["SABER_MAX_CONCURRENCY"] == _flags(vllm)["--max-num-seqs"]
    # config and profiles mounted where the image looks for them
    assert _host_file(gateway, "/etc/saber/gateway.yaml") == REPO / "configs" / "gateway.yaml"
    assert _host_file(gateway, "/etc/saber/profiles") == REPO / "profiles"
    assert any(p.split(":")[-1] == "8080" for p in map(interpolate, gateway["ports"]))


def test_every_bind_mount_exists(sim: dict[str, Any]) -> None:
    for name, service in sim["services"].items():
        for target, source in _mounts(service).items():
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} -> {target}"


def test_every_service_has_a_healthcheck(sim: dict[str, Any]) -> None:
    for name, service in sim["services"].items():
        if "healthcheck" in service:
            assert service["healthcheck"]["test"][0] == "CMD"
        else:  # the image's own
            assert "HEALTHCHECK" in _dockerfile(service).read_text(), name


def test_prometheus_loads_the_shipped_config_and_rules(gpu: dict[str, Any]) -> None:
    prom = gpu["services"]["prometheus"]
    config_path = _flags(prom)["--config.file"]
    assert _host_file(prom, config_path) == PROMETHEUS_YML
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    for rule_file in config["rule_files"]:  # relative to the config file, as Prometheus reads it
        in_container = str(PurePosixPath(config_path).parent / rule_file)
        host = _host_file(prom, in_container)
        assert host is not None and host.exists(), rule_file


def test_prometheus_scrapes_services_that_exist(sim: dict[str, Any]) -> None:
    services = sim["services"]
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    jobs = {}
    for job in config["scrape_configs"]:
        targets = [t for sc in job.get("static_configs", []) for t in sc["targets"]]
        targets += [
            f"{n}:{sd['port']}" for sd in job.get("dns_sd_configs", []) for n in sd["names"]
        ]
        jobs[job["job_name"]] = targets
    assert set(jobs) == {"saber-gateway", "vllm", "saber-sim"}
    ports = {
        "gateway": "8080",  # the image's EXPOSE / SABER_PORT
        "vllm": _flags(services["vllm"])["--port"],
        "saber-sim": _flags(services["saber-sim"])["--port"],
    }
    for job, targets in jobs.items():
        for target in targets:
            host, port = target.split(":")
            assert host in services and ports[host] == port, f"{job}: {target}"


def test_grafana_provisioning_finds_prometheus_and_the_dashboard(gpu: dict[str, Any]) -> None:
    grafana = gpu["services"]["grafana"]
    provisioning = _host_file(grafana, "/etc/grafana/provisioning")
    assert provisioning is not None
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    url = urlsplit(datasources["datasources"][0]["url"])
    assert url.hostname in gpu["services"] and url.port == 9090
    providers = yaml.safe_load((provisioning / "dashboards" / "saber.yml").read_text())
    folder = _host_file(grafana, providers["providers"][0]["options"]["path"])
    assert folder is not None
    dashboards = sorted(folder.glob("*.json"))
    assert [p.name for p in dashboards] == ["saber.json"]
    assert json.loads(dashboards[0].read_text())["uid"] == "saber-gateway"
    home = _host_file(grafana, _env(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert home is not None and home.exists()


def test_sim_override_swaps_vllm_for_saber_sim_with_its_profile(sim: dict[str, Any]) -> None:
    s = sim["services"]
    assert "gpu" in s["vllm"]["profiles"]  # vLLM off unless asked for
    saber_sim = s["saber-sim"]
    assert saber_sim["entrypoint"] == ["saber-sim"]
    assert _dockerfile(saber_sim) == _dockerfile(s["gateway"])  # the gateway's image
    assert interpolate(saber_sim["image"]) == interpolate(s["gateway"]["image"])
    sim_flags = _flags(saber_sim)
    assert sim_flags["--host"] == "0.0.0.0"
    url = urlsplit(_env(s["gateway"])["SABER_BACKEND_URL"])
    assert (url.hostname, str(url.port)) == ("saber-sim", sim_flags["--port"])
    # The profile named is mounted, and was fitted on the preset the sim runs.
    profile = _host_file(s["gateway"], _env(s["gateway"])["SABER_PROFILE"])
    assert profile is not None and profile.exists()
    backend = json.loads(profile.read_text())["backend"]
    assert backend["kind"] == "sim" and backend["version"].endswith(
        f"preset {sim_flags['--preset']}"
    )


def _compose_command() -> list[str] | None:
    docker = find_tool("docker")
    if docker is not None:
        done = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
        if done.returncode == 0:
            return [docker, "compose"]
    legacy = find_tool("docker-compose")
    return [legacy] if legacy is not None else None


@pytest.mark.parametrize("files", [[BASE], [BASE, SIM]], ids=["gpu", "sim"])
def test_docker_compose_config_validates(files: list[Path]) -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("no compose client: neither `docker compose` nor docker-compose")
    args = [a for f in files for a in ("-f", str(f))]
    done = subprocess.run(
        [*command, *args, "config", "--quiet"], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _seconds(duration: str) -> float:
    """A compose duration ("40s", "1m30s") in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s|ms)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * scale[u] for n, u in parts)


def test_the_grace_period_covers_the_drain(gpu: dict[str, Any]) -> None:
    """SIGTERM drains the gateway for drain_timeout_s: the Dockerfile, the compose file
    and docs/deploy.md agree on a grace period that leaves it 5 s or more."""
    from saber.config import GatewayConfig

    default = GatewayConfig.model_fields["drain_timeout_s"].default
    gateway = gpu["services"]["gateway"]
    grace = _seconds(gateway["stop_grace_period"])
    drain = float(_env(gateway)["SABER_DRAIN_TIMEOUT_S"])
    dockerfile = (REPO / "Dockerfile").read_text()
    baked = re.search(r"^ENV SABER_DRAIN_TIMEOUT_S=(\d+)$", dockerfile, re.M)
    told = re.search(r"docker stop -t (\d+)", dockerfile)
    assert baked and told and "STOPSIGNAL SIGTERM" in dockerfile
    assert float(baked[1]) == drain == default
    assert float(told[1]) == grace >= drain + 5
    doc = (REPO / "docs" / "deploy.md").read_text()
    assert f"`stop_grace_period` for the\ngateway is {grace:.0f} s" in doc
    assert f"SABER_DRAIN_TIMEOUT_S={drain:.0f}" in doc and f"docker stop -t {grace:.0f}" in doc
