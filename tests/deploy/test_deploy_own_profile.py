"""Mounting your own profile: the kustomize overlay deploy/k8s-own-profile and the compose
override deploy/compose.profile.yaml, each checked as the base manifests are (schemas,
the parts naming each other, ``saber-gateway --check`` on what the gateway would load).
Issue 48: the manifests shipped the sim's profile with no example of mounting yours."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_support import DEPLOY, REPO, interpolate
from test_deploy_compose import BASE, SIM, _compose_command
from test_deploy_k8s import config_file, one, schema_version

from saber.gateway.cli import main
from saber.speed import load_profile

OVERLAY = DEPLOY / "k8s-own-profile"
OVERRIDE = DEPLOY / "compose.profile.yaml"


def _overlay() -> dict[str, Any]:
    return dict(yaml.safe_load((OVERLAY / "kustomization.yaml").read_text()))


def _patch() -> dict[str, Any]:
    (patch,) = _overlay()["patches"]
    return dict(yaml.safe_load((OVERLAY / patch["path"]).read_text()))


def _profile_file() -> tuple[str, Path]:
    """The ConfigMap's key for the profile, and the file it is made from."""
    (generator,) = _overlay()["configMapGenerator"]
    (entry,) = generator["files"]
    key, _, path = entry.rpartition("=")
    return (key or Path(path).name), OVERLAY / path


def test_the_overlay_builds_on_the_base_and_mounts_the_profile_it_names() -> None:
    overlay = _overlay()
    assert (OVERLAY / overlay["resources"][0]).resolve() == (DEPLOY / "k8s").resolve()
    assert overlay["namespace"] == "saber"
    key, path = _profile_file()
    assert load_profile(path).kind  # a profile the gateway can load
    patch = _patch()
    base = one("Deployment", patch["metadata"]["name"])
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    base_names = [c["name"] for c in base["spec"]["template"]["spec"]["containers"]]
    assert container["name"] in base_names  # merged into the gateway, not added beside it
    env = {e["name"]: e["value"] for e in container["env"]}
    (mount,) = container["volumeMounts"]
    (volume,) = patch["spec"]["template"]["spec"]["volumes"]
    assert mount["name"] == volume["name"] and mount["readOnly"] is True
    (generator,) = overlay["configMapGenerator"]
    assert volume["configMap"]["name"] == generator["name"]
    assert PurePosixPath(env["SABER_PROFILE"]) == PurePosixPath(mount["mountPath"]) / key
    # Not inside the base's ConfigMap mount (/etc/saber), where a mount point cannot be made.
    base_mounts = [m["mountPath"] for m in base["spec"]["template"]["spec"]["containers"][0]
                   ["volumeMounts"]]  # fmt: skip
    assert all(PurePosixPath(m) not in PurePosixPath(mount["mountPath"]).parents
               for m in base_mounts)  # fmt: skip


def test_the_gateway_starts_with_the_overlays_profile(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The base's config with SABER_PROFILE naming the mounted file passes the gateway's
    own check, which loads the profile."""
    _, path = _profile_file()
    monkeypatch.setenv("SABER_PROFILE", str(path))
    assert main(["--config", str(config_file()), "--check"]) == 0
    assert path.name in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_renders_the_overlay_and_every_document_validates() -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=60,
        check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]
    maps = [d for d in docs if d["kind"] == "ConfigMap"]
    profile_map = next(m for m in maps if m["metadata"]["name"].startswith("saber-gateway-profile"))
    key, path = _profile_file()
    assert profile_map["data"][key] == path.read_text()
    gateway = next(d for d in docs if d["kind"] == "Deployment")
    volumes = {v["name"]: v for v in gateway["spec"]["template"]["spec"]["volumes"]}
    assert volumes["profile"]["configMap"]["name"] == profile_map["metadata"]["name"]  # hashed
    assert "config" in volumes  # the base's own volume is kept
    for doc in docs:
        if not doc["apiVersion"].startswith("monitoring.coreos.com/"):
            kubernetes_validate.validate(doc, schema_version(), strict=True)


def _gateway_override() -> dict[str, Any]:
    return dict(yaml.safe_load(OVERRIDE.read_text()))["services"]["gateway"]


def test_the_compose_override_mounts_the_profile_it_names() -> None:
    gateway = _gateway_override()
    (spec,) = gateway["volumes"]
    source, target, mode = interpolate(spec).split(":")
    assert mode == "ro" and gateway["environment"]["SABER_PROFILE"] == target
    # By default the file the README's saber-profile writes (--out profiles/...).
    readme = (REPO / "README.md").read_text()
    out = re.search(r"saber-profile .*--out (\S+)", readme)
    assert out is not None
    assert (DEPLOY / source).resolve() == (REPO / out[1]).resolve()
    # Anywhere else on the host with SABER_OWN_PROFILE.
    mine = "/srv/profiles/h100.json"
    assert interpolate(spec, {"SABER_OWN_PROFILE": mine}).split(":")[0] == mine


@pytest.mark.parametrize("files", [[BASE, OVERRIDE], [BASE, SIM, OVERRIDE]], ids=["gpu", "sim"])
def test_docker_compose_config_validates_with_the_override(
    files: list[Path], tmp_path: Path
) -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("no compose client: neither `docker compose` nor docker-compose")
    profile = tmp_path / "mine.json"
    profile.write_text(_profile_file()[1].read_text())
    args = [a for f in files for a in ("-f", str(f))]
    done = subprocess.run(
        [*command, *args, "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "SABER_OWN_PROFILE": str(profile)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    merged = yaml.safe_load(done.stdout)["services"]["gateway"]
    assert merged["environment"]["SABER_PROFILE"] == "/etc/saber/own-profile.json"
    assert str(profile) in done.stdout and "/etc/saber/gateway.yaml" in done.stdout
