"""``GET /server_info``: as vLLM's, only in developer mode, and it says the policy."""

from __future__ import annotations

from typing import Literal

import httpx
import pytest

from saber.sim.http import serve_in_thread
from saber.sim.http.cli import build_parser, main, settings_from_args


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_json_says_the_policy_where_vllm_dumps_it(
    policy: Literal["fcfs", "priority"],
) -> None:
    with serve_in_thread(dev_mode=True, scheduling_policy=policy, max_num_seqs=7) as sim:
        resp = httpx.get(sim.url + "/server_info", params={"config_format": "json"})
    assert resp.status_code == 200
    info = resp.json()
    assert set(info) == {"vllm_config", "vllm_env", "system_env"}
    scheduler = info["vllm_config"]["scheduler_config"]
    assert scheduler["policy"] == policy and scheduler["max_num_seqs"] == 7
    assert info["vllm_config"]["model_config"]["served_model_name"] == sim.model
    assert info["vllm_env"] == {"VLLM_SERVER_DEV_MODE": True}


def test_text_is_the_default_format_and_a_string_as_vllms() -> None:
    with serve_in_thread(dev_mode=True, scheduling_policy="priority") as sim:
        default = httpx.get(sim.url + "/server_info").json()
        text = httpx.get(sim.url + "/server_info", params={"config_format": "text"}).json()
        bad = httpx.get(sim.url + "/server_info", params={"config_format": "yaml"})
    assert default == text
    assert isinstance(text["vllm_config"], str)
    assert text["vllm_config"].startswith(f"model={sim.model!r}, ")
    assert bad.status_code == 400
    err = bad.json()["error"]
    assert (err["code"], err["type"], err["param"]) == (400, "Bad Request", "query.config_format")
    assert "'text' or 'json'" in err["message"]


def test_without_developer_mode_there_is_no_server_info() -> None:
    with serve_in_thread(scheduling_policy="priority") as sim:
        resp = httpx.get(sim.url + "/server_info", params={"config_format": "json"})
        assert httpx.get(sim.url + "/version").status_code == 200
    assert resp.status_code == 404


@pytest.mark.parametrize(("value", "on"), [(None, False), ("0", False), ("1", True)])
def test_the_command_line_reads_vllms_variable(value: str | None, on: bool) -> None:
    env = {} if value is None else {"VLLM_SERVER_DEV_MODE": value}
    assert settings_from_args(build_parser().parse_args([]), env).dev_mode is on


def test_a_variable_vllm_could_not_read_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "true")
    with pytest.raises(SystemExit) as exit_:
        main(["--port", "0"])
    assert exit_.value.code == 2
    assert "VLLM_SERVER_DEV_MODE must be an integer" in capsys.readouterr().err
