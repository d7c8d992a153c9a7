"""Gateway settings: the shipped file, precedence, and messages that name the culprit."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from saber.backend import BackendKind
from saber.bench._grid import shipped_tasks
from saber.config import (
    DEFAULT_CONFIG_DIR,
    DEFAULT_PROFILE_DIR,
    ENV_VARS,
    BackendSettings,
    ConfigError,
    load_gateway_config,
)
from saber.gateway.cli import main
from saber.gateway.control.settings import load_settings
from saber.scheduler import Policy
from saber.speed import ProfileError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "path", sorted(DEFAULT_CONFIG_DIR.glob("gateway*.yaml")), ids=lambda p: p.name
)
def test_shipped_gateway_configs_load(path: Path) -> None:
    cfg = load_gateway_config(path, env={})
    assert cfg.default_task in cfg.tasks


def test_shipped_config_has_the_paper_tasks_and_code_completion() -> None:
    """The paper's task types, chat-like code_qna with a first token and a reading pace
    (issue 47: what people state), the other three with the paper's whole-answer SLAs,
    and code_completion on its first token (CATO); the benchmarks keep the paper's."""
    cfg = load_gateway_config(env={})
    paper = {"code_generation": 8.0, "code_summary": 1.0, "code_translation": 12.0}
    assert {name: cfg.tasks[name].slo.e2e_s for name in paper} == paper
    qna = cfg.tasks["code_qna"].slo
    assert (qna.ttft_s, qna.tpot_s, qna.e2e_s) == (0.5, 0.05, None)
    completion = cfg.tasks["code_completion"]
    assert completion.expected_tokens == 64 and completion.slo.parts == ("ttft",)
    assert completion.slo.ttft_s == 1.0 and completion.useful_s == 3
    assert shipped_tasks()["code_qna"].slo.parts == ("e2e",)  # the paper's, in the benches


def test_precedence_cli_over_env_over_file(tmp_path: Path) -> None:
    f = tmp_path / "g.yaml"
    f.write_text("port: 1111\nwindow_size: 3\nbackend: {url: 'http://file:1'}\n")
    env = {"SABER_PORT": "2222", "SABER_BACKEND_URL": "http://env:2/v1/"}
    cfg = load_gateway_config(f, env=env, overrides={"port": 3333})
    assert cfg.port == 3333  # flag
    assert cfg.backend.url == "http://env:2"  # environment (trailing /v1 dropped)
    assert cfg.window_size == 3  # file
    assert cfg.queue_cap == 256  # default


def test_every_env_kind(tmp_path: Path) -> None:
    env = {
        "SABER_API_KEYS": "k1, k2",
        "SABER_MAX_CONCURRENCY": "none",
        "SABER_POLICY": "paper",
        "SABER_ALIASES": "{fast: {task: code_qna, model: real}}",
        "SABER_RULES": "[{endpoint: chat, task: code_summary}]",
        "SABER_TASKS": '{"t1": {"mean_input_tokens": 1, "mean_output_tokens": 2, '
        '"sla_s": 1, "max_tokens": 4}}',
        "SABER_DEFAULT_TASK": "t1",
        "SABER_BACKEND_TRANSPORT": "aiohttp",
        "SABER_LOG_REQUESTS": "false",
        "SABER_PROTECTION": "frozen",
        "SABER_LPQ": "paper",
        "SABER_CALIBRATE": "true",
    }
    with pytest.raises(ConfigError, match=r"aliases\.fast\.task: unknown task type 'code_qna'"):
        load_gateway_config(env=env)
    env["SABER_ALIASES"] = "{fast: {task: t1, model: real}}"
    env["SABER_RULES"] = "[{endpoint: chat, task: t1}]"
    cfg = load_gateway_config(env=env)
    assert cfg.api_keys == ["k1", "k2"]
    assert cfg.max_concurrency is None and cfg.policy == "paper"
    assert cfg.protection == "frozen" and cfg.lpq == "paper" and cfg.calibrate is True
    policy = Policy.from_config(cfg)
    assert (policy.protection, policy.lpq, policy.calibrate) == ("frozen", "paper", True)
    assert policy.order == "random" and policy.learn_lengths is False  # the paper's, unset
    assert list(cfg.tasks) == ["t1"] and cfg.aliases["fast"].model == "real"
    assert cfg.backend.transport == "aiohttp" and cfg.log_requests is False


@pytest.mark.parametrize(
    ("yaml_text", "env", "expected"),
    [
        ("window_size: 0\n", {}, "window_size: Input should be greater than or equal to 1"),
        ("backend: {url: 'ftp://x'}\n", {}, "backend.url: expected an http"),
        ("nonsense: 1\n", {}, "nonsense: Extra inputs are not permitted"),
        ("", {"SABER_PORT": "eighty"}, "port: Input should be a valid integer"),
        ("", {"SABER_PORT": "eighty"}, "(from environment variable SABER_PORT)"),
        ("default_task: poetry\n", {}, "default_task: unknown task type 'poetry'"),
        ("tasks: {x: {sla_s: 1}}\n", {}, "tasks.x: invalid configuration"),
        ("- a\n- b\n", {}, "expected a mapping of settings, got list"),
        ("a: [\n", {}, "not valid YAML"),
    ],
)
def test_bad_config_messages(
    tmp_path: Path, yaml_text: str, env: dict[str, str], expected: str
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(yaml_text)
    with pytest.raises(ConfigError) as info:
        load_gateway_config(f, env=env)
    assert expected in str(info.value)
    assert str(f) in str(info.value) or "environment" in str(info.value)


def test_profile_path_in_file_is_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    f = tmp_path / "sub" / "g.yaml"
    f.write_text("profile: ../p.json\n")
    assert load_gateway_config(f, env={}).profile == tmp_path / "sub" / "../p.json"
    assert load_gateway_config(f, env={"SABER_PROFILE": "rel.json"}).profile == Path("rel.json")


def test_default_profile_is_the_shipped_one() -> None:
    cfg = load_gateway_config(env={})
    assert cfg.profile is None
    assert cfg.profile_path() == DEFAULT_PROFILE_DIR / "saber-sim-paper.json"


def test_bad_profile_is_named(tmp_path: Path) -> None:
    p = tmp_path / "p.json"
    p.write_text('{"kind": "usl"}')
    with pytest.raises(ProfileError, match=str(p)):
        load_settings(env={}, overrides={"profile": str(p)})


def test_env_vars_are_documented() -> None:
    doc = (REPO / "docs" / "gateway.md").read_text()
    missing = [name for name in [*ENV_VARS, "SABER_CONFIG"] if name not in doc]
    assert not missing


def test_cli_bad_config_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("window_size: -3\n")
    assert main(["--config", str(f), "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("saber-gateway: cannot start: ")
    assert str(f) in err and "window_size" in err


def test_cli_missing_profile_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--profile", str(tmp_path / "nope.json"), "--check"]) == 2
    err = capsys.readouterr().err
    assert "nope.json: cannot read profile" in err


def test_cli_check_ok(profile_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--profile", str(profile_path), "--port", "9999", "--check"]) == 0
    assert "settings OK" in capsys.readouterr().out


def test_cli_process_exits_nonzero_without_traceback(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("backend: {url: 'nope'}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "saber.gateway.cli", "--config", str(f)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "backend.url" in proc.stderr and str(f) in proc.stderr


def test_backend_kind_setting() -> None:
    assert load_gateway_config(env={}).backend.kind == "auto"
    assert load_gateway_config(env={"SABER_BACKEND_KIND": "LlamaCpp"}).backend.kind == "llamacpp"
    assert load_gateway_config(env={"SABER_BACKEND_KIND": "none"}).backend.kind == "auto"
    assert load_gateway_config(env={}, overrides={"backend.kind": None}).backend.kind == "auto"
    with pytest.raises(ConfigError, match=r"backend\.kind: .*SABER_BACKEND_KIND"):
        load_gateway_config(env={"SABER_BACKEND_KIND": "tgi"})
    # The setting's values are saber.backend's kinds, and auto.
    annotation = BackendSettings.model_fields["kind"].annotation
    assert set(typing.get_args(annotation)) == {"auto", *(k.value for k in BackendKind)}


def test_backend_metrics_interval_setting() -> None:
    assert load_gateway_config(env={}).backend.metrics_interval_s == 1.0
    for off in ("0", "none"):
        env = {"SABER_BACKEND_METRICS_INTERVAL_S": off}
        assert not load_gateway_config(env=env).backend.metrics_interval_s
    for bad in ("-1", "0.01", "often"):
        with pytest.raises(ConfigError, match=r"backend\.metrics_interval_s"):
            load_gateway_config(env={"SABER_BACKEND_METRICS_INTERVAL_S": bad})


def test_max_sequences_per_request_setting() -> None:
    cfg = load_gateway_config(env={})
    assert cfg.max_sequences_per_request is None and cfg.sequence_limit() == 256
    env = {"SABER_MAX_SEQUENCES_PER_REQUEST": "32"}
    assert load_gateway_config(env=env).sequence_limit() == 32
    both = {"SABER_MAX_CONCURRENCY": "none", "SABER_MAX_SEQUENCES_PER_REQUEST": "none"}
    assert load_gateway_config(env=both).sequence_limit() is None
    above = {"SABER_MAX_CONCURRENCY": "8", "SABER_MAX_SEQUENCES_PER_REQUEST": "9"}
    with pytest.raises(ConfigError) as info:
        load_gateway_config(env=above)
    assert "max_sequences_per_request: 9 is above max_concurrency (8)" in str(info.value)
    assert "SABER_MAX_SEQUENCES_PER_REQUEST" in str(info.value)


@pytest.mark.parametrize(
    ("raw", "value"),
    [("auto", "auto"), ("Auto", "auto"), ("true", True), ("FALSE", False), ("1", True)],
)
def test_forward_priority_setting(raw: str, value: object) -> None:
    assert load_gateway_config(env={}).backend.forward_priority is False  # off by default
    env = {"SABER_BACKEND_FORWARD_PRIORITY": raw}
    assert load_gateway_config(env=env).backend.forward_priority == value
    overrides = {"backend.forward_priority": raw}
    assert load_gateway_config(env={}, overrides=overrides).backend.forward_priority == value


@pytest.mark.parametrize("bad", ["maybe", "", "none", "detect"])
def test_forward_priority_is_true_false_or_auto(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_gateway_config(env={"SABER_BACKEND_FORWARD_PRIORITY": bad})
    text = str(info.value)
    assert f"backend.forward_priority: expected true, false or auto, got {bad!r}" in text
    assert "SABER_BACKEND_FORWARD_PRIORITY" in text


def test_forward_priority_per_backend(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "backend: {forward_priority: auto}\n"
        "backends:\n"
        "  - {url: 'http://a:1'}\n"
        "  - {url: 'http://b:1', forward_priority: false}\n"
        "  - {url: 'http://c:1', forward_priority: 'TRUE'}\n"
        "  - {url: 'http://d:1', forward_priority: 1}\n"
        "  - {url: 'http://e:1', forward_priority: 0}\n"
    )
    backends = load_gateway_config(path, env={}).backend_list()
    values = [x.settings.forward_priority for x in backends]
    assert values == ["auto", False, True, True, False]
    for bad in ("2", "[1]", "1.0"):
        path.write_text(f"backends: [{{url: 'http://a:1', forward_priority: {bad}}}]\n")
        with pytest.raises(ConfigError, match=r"backends\.0\.forward_priority: expected true"):
            load_gateway_config(path, env={})
