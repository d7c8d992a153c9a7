"""Several backends in the config: each on the shared ``backend`` settings with its own
URL, name and profile; the single-backend config of before reads as one backend."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from saber.config import ConfigError, load_gateway_config
from saber.gateway.cli import main
from saber.gateway.control.settings import load_settings


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    return path


def test_without_backends_the_one_backend_is_backend_url() -> None:
    cfg = load_gateway_config(env={}, overrides={"backend.url": "http://10.0.0.5:8000/v1"})
    (only,) = cfg.backend_list()
    assert only.name == "10.0.0.5:8000" and only.settings == cfg.backend
    assert only.profile is None


def test_each_backend_shares_backend_settings_and_overrides_its_own(tmp_path: Path) -> None:
    text = """
backend:
  kind: vllm
  read_timeout_s: 77
  api_key: shared
backends:
  - url: http://a:8000
    name: a10-0
  - url: http://b:8000/v1/
    api_key: own
    profile: profiles/a100.json
"""
    cfg = load_gateway_config(write(tmp_path, text), env={})
    a, b = cfg.backend_list()
    assert (a.name, a.settings.url, a.settings.api_key) == ("a10-0", "http://a:8000", "shared")
    assert (b.name, b.settings.url, b.settings.api_key) == ("b:8000", "http://b:8000", "own")
    assert a.settings.read_timeout_s == b.settings.read_timeout_s == 77
    assert a.settings.kind == b.settings.kind == "vllm"
    # A profile named in the file is relative to the file, as the gateway's own is.
    assert a.profile is None and b.profile == tmp_path / "profiles" / "a100.json"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("backends: [{url: 'http://a:1'}, {url: 'http://a:1'}]", "'a:1' is used twice"),
        ("backends: [{url: 'ftp://a:1'}]", "expected an http:// or https:// URL"),
        ("backends: [{url: 'http://a:1', name: 'has space'}]", "backends.0.name"),
        ("backends: [{url: 'http://a:1', weight: 2}]", "backends.0.weight"),
        ("cluster: {gateways: 0}", "cluster.gateways"),
        ("cluster: {stale: maybe}", "cluster.stale"),
        ("backend: {eject_after: 0}", "backend.eject_after"),
        ("cluster: {affinity_margin: 1.5}", "cluster.affinity_margin"),
        ("cluster: {affinity_margin: -0.05}", "cluster.affinity_margin"),
        ("cluster: {affinity_margin: often}", "cluster.affinity_margin"),
        ("cluster: {affinity_header: 'x session'}", "cluster.affinity_header"),
        ("cluster: {affinity_header: ''}", "cluster.affinity_header"),
    ],
)
def test_bad_backends_are_named(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_gateway_config(write(tmp_path, text), env={})


def test_backends_from_the_environment_as_yaml() -> None:
    env = {
        "SABER_BACKENDS": "[{url: 'http://a:8000', name: a}, {url: 'http://b:8000', name: b}]",
        "SABER_CLUSTER_GATEWAYS": "2",
        "SABER_CLUSTER_STALE": "closed",
    }
    cfg = load_gateway_config(env=env)
    assert [b.name for b in cfg.backend_list()] == ["a", "b"]
    assert cfg.cluster.gateways == 2 and cfg.cluster.stale == "closed"
    assert cfg.cluster.headroom is None


def test_affinity_is_off_by_default_and_set_by_file_or_environment(tmp_path: Path) -> None:
    cfg = load_gateway_config(env={})
    assert cfg.cluster.affinity_margin is None
    assert cfg.cluster.affinity_header == "x-session-id"
    text = "cluster: {affinity_margin: 0.05, affinity_header: X-Editor-Session}\n"
    cfg = load_gateway_config(write(tmp_path, text), env={})
    assert cfg.cluster.affinity_margin == 0.05
    assert cfg.cluster.affinity_header == "X-Editor-Session"
    env = {"SABER_CLUSTER_AFFINITY_MARGIN": "0", "SABER_CLUSTER_AFFINITY_HEADER": "x-s"}
    cfg = load_gateway_config(write(tmp_path, text), env=env)
    assert (cfg.cluster.affinity_margin, cfg.cluster.affinity_header) == (0.0, "x-s")
    off = {"SABER_CLUSTER_AFFINITY_MARGIN": "none"}
    assert load_gateway_config(write(tmp_path, text), env=off).cluster.affinity_margin is None


def test_replicas_of_one_profile_share_it_and_each_may_have_its_own(
    tmp_path: Path, profile_path: Path
) -> None:
    own = tmp_path / "own.json"
    shutil.copy(profile_path, own)
    text = f"""
profile: {profile_path}
backends:
  - {{url: 'http://a:8000'}}
  - {{url: 'http://b:8000'}}
  - {{url: 'http://c:8000', profile: own.json}}
"""
    settings = load_settings(write(tmp_path, text), env={})
    a, b, c = settings.backend_profiles()
    assert a.profile is b.profile is settings.profile
    assert c.profile_path == own and c.profile is not a.profile


def test_a_missing_backend_profile_stops_the_start(
    tmp_path: Path, profile_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = f"profile: {profile_path}\nbackends: [{{url: 'http://a:8000', profile: gone.json}}]\n"
    assert main(["--config", str(write(tmp_path, text)), "--check"]) == 2
    assert "gone.json: cannot read profile" in capsys.readouterr().err


def test_check_lists_the_backends(
    tmp_path: Path, profile_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = f"""
profile: {profile_path}
cluster: {{gateways: 2}}
backends:
  - {{url: 'http://vllm-0.vllm:8000', name: vllm-0}}
  - {{url: 'http://vllm-1.vllm:8000', name: vllm-1}}
"""
    assert main(["--config", str(write(tmp_path, text)), "--check"]) == 0
    out = capsys.readouterr().out
    assert "settings OK; 2 backends: vllm-0=http://vllm-0.vllm:8000" in out
    assert "vllm-1=http://vllm-1.vllm:8000" in out and "2 gateway(s)" in out
    assert "affinity" not in out
    with_affinity = text.replace("{gateways: 2}", "{gateways: 2, affinity_margin: 0.05}")
    assert main(["--config", str(write(tmp_path, with_affinity)), "--check"]) == 0
    out = capsys.readouterr().out
    assert "affinity within 0.05 of the best, sessions by x-session-id" in out
