"""Reload without restart: SIGHUP (or a change of the files) re-reads the config and
the profile, checks them, and swaps them in without dropping a request; a bad file is
refused with a log line and the settings in force stay."""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fake_vllm import MODEL, FakeVllm

from harness import (
    gateway_process,
    metric_value,
    scrape,
    wait_for,
    write_profile,
)
from saber.config import DEFAULT_GATEWAY_CONFIG
from saber.gateway import RunningGateway, load_settings, start_in_thread
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.sim.http import RunningSim
from saber.speed import USLModel

SLOW = USLModel(lam=300.0, sigma=0.1, kappa=0.002)


def write_config(path: Path, profile: Path, backend: str, **changes: Any) -> Path:
    data = yaml.safe_load(DEFAULT_GATEWAY_CONFIG.read_text())
    data.update(
        backend={**data["backend"], "url": backend, "kind": "vllm", "metrics_interval_s": 0},
        profile=str(profile),
        log_requests=False,
    )
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    path.write_text(yaml.safe_dump(data))
    return path


def test_reload_applies_what_it_can_and_keeps_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeVllm()
    profile = write_profile(tmp_path / "p.json")
    config = write_config(tmp_path / "g.yaml", profile, "http://vllm.invalid")
    settings = load_settings(config, env={}, overrides={"backend.model": MODEL})
    with start_in_thread(settings, transport=fake.transport()) as gw:
        url = gw.url + "/v1/completions"
        write_profile(profile, SLOW)
        write_config(
            config, profile, "http://elsewhere.invalid",
            **{"tasks.code_qna.sla_s": 2.5, "aliases.quick": {"task": "code_qna"},
               "max_concurrency": 7, "api_keys": ["sk-new"], "port": 1234},
        )  # fmt: skip
        with caplog.at_level(logging.INFO, logger=GATEWAY_LOGGER):
            assert gw.reload() is True
        g = gw.gateway
        assert g.tasks["code_qna"].sla_s == 2.5 and g.scheduler.tasks["code_qna"].sla_s == 2.5
        assert g.scheduler.policy.max_concurrency == 7
        assert g.scheduler.max_speed == pytest.approx(300.0)
        assert g.config.backend.url == "http://vllm.invalid"  # needs a restart: kept
        assert g.config.port == settings.config.port
        key = {"authorization": "Bearer sk-new"}
        assert httpx.post(url, json={"model": "quick", "prompt": "x"}).status_code == 401
        resp = httpx.post(url, json={"model": "quick", "prompt": "x"}, headers=key)
        assert resp.status_code == 200 and resp.headers["x-saber-task"] == "code_qna"
        messages = {r.getMessage(): r.__dict__ for r in caplog.records}
        assert messages["settings reloaded"]["profile_changed"] is True
        assert {"tasks", "aliases", "max_concurrency", "api_keys"} <= set(
            messages["settings reloaded"]["changed"]
        )
        restart = next(m for m in messages if "need a restart" in m)
        assert set(messages[restart]["needs_restart"]) == {"backend", "port"}
        assert "sk-new" not in caplog.text


@pytest.mark.parametrize(
    "breakage",
    [
        lambda config, profile: config.write_text("window_size: [oops\n"),
        lambda config, profile: config.write_text("max_concurrency: -3\n"),
        lambda config, profile: profile.write_text("{}"),
    ],
    ids=["yaml", "value", "profile"],
)
def test_a_bad_file_is_refused_and_the_settings_stay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, breakage: Any
) -> None:
    fake = FakeVllm()
    profile = write_profile(tmp_path / "p.json")
    config = write_config(tmp_path / "g.yaml", profile, "http://vllm.invalid", max_concurrency=9)
    settings = load_settings(config, env={}, overrides={"backend.model": MODEL})
    with start_in_thread(settings, transport=fake.transport()) as gw:
        breakage(config, profile)
        with caplog.at_level(logging.INFO, logger=GATEWAY_LOGGER):
            assert gw.reload() is False
        assert gw.gateway.config is settings.config
        assert gw.gateway.scheduler.policy.max_concurrency == 9
        refused = [r for r in caplog.records if r.getMessage().startswith("reload refused")]
        assert refused and str(tmp_path) in refused[0].__dict__["error"]
        text = httpx.get(gw.url + "/metrics").text
        assert metric_value(text, "saber_config_reloads_total", result="refused") == 1
        body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
        assert httpx.post(gw.url + "/v1/completions", json=body).status_code == 200


def test_a_change_of_the_files_is_noticed(tmp_path: Path) -> None:
    fake = FakeVllm()
    profile = write_profile(tmp_path / "p.json")
    config = write_config(
        tmp_path / "g.yaml", profile, "http://vllm.invalid", reload_interval_s=0.1
    )
    settings = load_settings(config, env={}, overrides={"backend.model": MODEL})
    with start_in_thread(settings, transport=fake.transport()) as gw:
        # A change is one from the stamps the watcher takes first: write after it took them.
        wait_for(lambda: watching(gw), describe="the file watcher's first stamps")
        write_config(config, profile, "http://x.invalid", reload_interval_s=0.1, queue_cap=3)
        wait_for(
            lambda: gw.gateway.scheduler.policy.queue_cap,
            lambda cap: cap == 3,
            describe="queue_cap 3",
        )
        write_profile(profile, SLOW)
        wait_for(
            lambda: gw.gateway.scheduler.max_speed,
            lambda speed: speed == pytest.approx(300.0),
            describe="the new profile's f(1), 300",
        )


def watching(gw: RunningGateway) -> bool:
    """Whether the gateway's file watcher has taken its first stamps of the files: its
    task is past its first line, waiting for its interval."""
    task = gw.gateway.reloader._watch
    return task is not None and task.get_coro().cr_await is not None  # type: ignore[union-attr]


def test_reload_under_load_drops_nothing(
    sim: RunningSim, profile_path: Path, tmp_path: Path
) -> None:
    """SIGHUP to a gateway serving 16 clients without pause: the config (a task's SLA,
    a new alias, the concurrency cap) and the profile are swapped in, and every request
    before, during and after is answered 200. A bad file then is refused, logged, and
    the gateway keeps serving."""
    profile = tmp_path / "profile.json"
    profile.write_bytes(profile_path.read_bytes())
    config = write_config(tmp_path / "gateway.yaml", profile, sim.url)
    data = yaml.safe_load(config.read_text())
    data["log_requests"] = True
    config.write_text(yaml.safe_dump(data))
    log = tmp_path / "gateway.log"
    gateway = gateway_process(model=sim.model, config=config, clean_env=True, log_path=log)
    gateway.start()
    results: list[tuple[int, str, str | None]] = []
    stop = threading.Event()
    reloaded = threading.Event()  # from then on, a third of the requests use the new alias

    def client(i: int) -> None:
        with httpx.Client(timeout=30) as c:
            n = 0
            while not stop.is_set():
                n += 1
                model = "quick" if reloaded.is_set() and n % 3 == 0 else sim.model
                payload = {"model": model, "prompt": "x", "max_tokens": 20, "stream": i % 2 == 0}
                try:
                    r = c.post(gateway.base_url + "/v1/completions", json=payload)
                    results.append((r.status_code, model, r.headers.get("x-saber-task")))
                except httpx.HTTPError as exc:
                    results.append((0, model, repr(exc)))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    try:
        for t in threads:
            t.start()
        wait_for(lambda: len(results), lambda n: n >= 50, describe="50 answers before the reload")
        before = len(results)
        write_profile(profile, SLOW)
        write_config(
            config, profile, sim.url,
            **{"tasks.code_qna.sla_s": 2.5, "aliases.quick": {"task": "code_qna"},
               "max_concurrency": 12, "log_requests": True},
        )  # fmt: skip
        gateway.send_signal(signal.SIGHUP)
        status = gateway.base_url + "/saber/status"
        wait_for(
            lambda: httpx.get(status).json()["tasks"]["code_qna"]["sla_s"],
            lambda sla: sla == 2.5,
            describe="code_qna's new SLA, 2.5 s",
        )
        now = httpx.get(status).json()
        assert now["profile"]["params"]["lam"] == pytest.approx(300.0)
        reloaded.set()
        # More than 50 answers after it, the new alias among them, once reloaded.
        wait_for(
            lambda: list(results[before:]),
            lambda after: len(after) > 50 and ("quick", "code_qna") in {r[1:] for r in after},
            describe="50 answers since the reload, one through the new alias",
        )
        config.write_text("tasks: {broken: {}}\n")
        gateway.send_signal(signal.SIGHUP)
        wait_for(
            lambda: scrape(gateway.base_url, "saber_config_reloads_total", result="refused"),
            lambda refused: refused == 1,
            describe="the bad file refused",
        )
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    try:
        assert not any(t.is_alive() for t in threads), "a client still waits"
        failed = [r for r in results if r[0] != 200]
        assert not failed, failed[:5]
        assert (
            httpx.get(gateway.base_url + "/saber/status").json()["tasks"]["code_qna"]["sla_s"]
            == 2.5
        )  # the bad file changed nothing
    finally:
        gateway.stop(grace_s=10)
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    msgs = [x["msg"] for x in lines]
    assert msgs.count("settings reloaded") == 1
    assert msgs.count("reload refused: the settings in force stay") == 1
    served = [x for x in lines if x.get("logger") == "saber.gateway.requests"]
    assert len(served) == len(results) and {x["outcome"] for x in served} == {"served"}
