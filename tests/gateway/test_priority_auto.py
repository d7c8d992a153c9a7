"""``backend.forward_priority: auto``: the tier goes as the request's priority only to an
engine that says it schedules by priority (real saber-sim servers, which answer
``/server_info`` as vLLM does in developer mode)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import openai
import pytest
from fake_llamacpp import FakeLlamaCpp
from fake_vllm import FakeVllm
from gateway_support import GatewayFactory, start_fake

from harness import free_port, metric_value, wait_for, write_profile
from saber.gateway import RunningGateway
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.sim.http import RunningSim, serve_in_thread
from saber.speed import USLModel

FORWARD = "saber_backend_forward_priority"
CANNOT_TELL = "cannot tell whether the backend schedules by priority"
# f(1) = 20 tokens/s to the gateway: 5 tokens are on time, 400 (ignore_eos) cannot make
# code_generation's 8 s and are served demoted by the idle engine, which (saber-sim at
# 50x) makes them in a fraction of a second. The long one goes first: once a request has
# finished, the gateway knows the engine is faster than that (its fastest request seen).
SLOW = USLModel(lam=20.0, sigma=0.1, kappa=0.002)
SHORT, LONG = 5, 400


class Recording(httpx.AsyncBaseTransport):
    """Real HTTP to the backend, keeping what the gateway asked and the bodies it sent."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.gets: list[str] = []
        self.posts: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.posts.append(json.loads(request.content))
        else:
            self.gets.append(request.url.path)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture(scope="module")
def slow_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_profile(tmp_path_factory.mktemp("slow") / "slow.json", SLOW)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=GATEWAY_LOGGER)
    return caplog


@contextlib.contextmanager
def sim(policy: Literal["fcfs", "priority"], *, dev_mode: bool = True) -> Iterator[RunningSim]:
    with serve_in_thread(time_scale=50.0, scheduling_policy=policy, dev_mode=dev_mode) as s:
        yield s


def start(
    factory: GatewayFactory, url: str, profile: Path, **overrides: Any
) -> tuple[RunningGateway, Recording]:
    rec = Recording()
    settings = {"backend.forward_priority": "auto", **overrides}
    return factory(url, transport=rec, profile=profile, **settings), rec


def send(gw: RunningGateway, model: str, max_tokens: int, **extra: Any) -> str:
    """One chat completion through the SDK; the gateway's outcome for it."""
    api = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
    raw = api.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": "x"}],
        max_tokens=max_tokens,
        extra_body={"ignore_eos": True, **extra},
    )
    raw.parse()
    return raw.headers["x-saber-outcome"]


def engine(gw: RunningGateway) -> dict[str, Any]:
    backend: dict[str, Any] = httpx.get(gw.url + "/saber/status").json()["backend"]
    return backend


def forward_series(gw: RunningGateway, **labels: str) -> float:
    return metric_value(httpx.get(gw.url + "/metrics").text, FORWARD, **labels)


def said(logs: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in logs.records if text in r.getMessage()]


def test_a_priority_engine_gets_the_tier(
    gateway_factory: GatewayFactory, slow_profile: Path, logs: pytest.LogCaptureFixture
) -> None:
    with sim("priority") as s:
        gw, rec = start(gateway_factory, s.url, slow_profile)
        assert send(gw, s.model, LONG) == "admitted_demoted"
        assert send(gw, s.model, SHORT) == "admitted"
        assert send(gw, s.model, SHORT, priority=-5) == "admitted"  # the client's replaced
    assert [body["priority"] for body in rec.posts] == [1, 0, 0]
    assert rec.gets.count("/server_info") == 1
    state = engine(gw)
    assert (state["forward_priority"], state["forward_priority_source"]) == (True, "detected")
    assert state["scheduling_policy"] == "priority"
    assert forward_series(gw, source="detected", policy="priority") == 1
    (line,) = said(logs, "the admission tier as the request priority")
    assert line.getMessage().startswith("forwarding") and line.__dict__["forward_priority"]
    assert not said(logs, CANNOT_TELL)


def test_an_fcfs_engine_gets_the_client_body_as_it_came(
    gateway_factory: GatewayFactory, slow_profile: Path, logs: pytest.LogCaptureFixture
) -> None:
    with sim("fcfs") as s:
        gw, rec = start(gateway_factory, s.url, slow_profile)
        assert send(gw, s.model, LONG) == "admitted_demoted"
        assert send(gw, s.model, SHORT, priority=3) == "admitted"
    assert "priority" not in rec.posts[0] and rec.posts[1]["priority"] == 3
    assert engine(gw)["scheduling_policy"] == "fcfs"
    assert forward_series(gw, source="detected", policy="fcfs") == 0
    (line,) = said(logs, "the admission tier as the request priority")
    assert line.getMessage().startswith("not forwarding") and "fcfs" in line.getMessage()


def test_an_engine_that_does_not_say_gets_nothing_and_it_is_logged_once(
    gateway_factory: GatewayFactory, slow_profile: Path, logs: pytest.LogCaptureFixture
) -> None:
    with sim("priority", dev_mode=False) as s:  # vLLM without VLLM_SERVER_DEV_MODE=1
        gw, rec = start(gateway_factory, s.url, slow_profile)
        assert send(gw, s.model, LONG) == "admitted_demoted"
        assert send(gw, s.model, SHORT) == "admitted"
    assert all("priority" not in body for body in rec.posts)
    assert engine(gw)["forward_priority_source"] == "unknown"
    assert forward_series(gw, source="unknown", policy="") == 0
    (warning,) = said(logs, CANNOT_TELL)
    assert warning.levelno == logging.WARNING
    assert "backend.forward_priority: true forwards it anyway" in warning.getMessage()
    assert "VLLM_SERVER_DEV_MODE=1" in warning.__dict__["error"]


def test_a_vllm_without_server_info_gets_nothing(
    gateway_factory: GatewayFactory, logs: pytest.LogCaptureFixture
) -> None:
    fake = FakeVllm()  # /server_info: 404, as vLLM answers without developer mode
    gw = start_fake(gateway_factory, fake, **{"backend.forward_priority": "auto"})
    assert send(gw, "fake-coder", SHORT) == "admitted"
    assert "priority" not in fake.posts[0][0]
    assert len(said(logs, CANNOT_TELL)) == 1


@pytest.mark.parametrize(("setting", "sent"), [(True, True), (False, False)])
def test_configured_it_is_not_asked(
    gateway_factory: GatewayFactory, slow_profile: Path, setting: bool, sent: bool
) -> None:
    with sim("fcfs" if setting else "priority") as s:
        gw, rec = start(
            gateway_factory, s.url, slow_profile, **{"backend.forward_priority": setting}
        )
        assert send(gw, s.model, SHORT) == "admitted"
    assert ("priority" in rec.posts[0]) is sent
    assert "/server_info" not in rec.gets
    assert forward_series(gw, source="configured", policy="") == float(sent)


def test_llamacpp_is_not_asked(gateway_factory: GatewayFactory) -> None:
    fake = FakeLlamaCpp()
    gw = gateway_factory(
        "http://llama.invalid", transport=fake.transport(), **{"backend.forward_priority": "auto"}
    )
    assert forward_series(gw, source="detected", policy="") == 0
    assert engine(gw)["kind"] == "llamacpp"


def test_each_backend_is_asked_for_itself(
    gateway_factory: GatewayFactory, slow_profile: Path
) -> None:
    with sim("priority") as p, sim("fcfs") as f, sim("priority", dev_mode=False) as n:
        urls = {"prio": p.url, "fcfs": f.url, "mute": n.url}
        backends = [{"name": name, "url": url} for name, url in urls.items()]
        backends.append({"name": "forced", "url": n.url + "/v1", "forward_priority": True})
        gw, _ = start(gateway_factory, p.url, slow_profile, backends=backends)
        text = httpx.get(gw.url + "/metrics").text
    expected = {
        "prio": ("detected", "priority", 1.0),
        "fcfs": ("detected", "fcfs", 0.0),
        "mute": ("unknown", "", 0.0),
        "forced": ("configured", "", 1.0),
    }
    for name, (source, policy, value) in expected.items():
        assert metric_value(text, FORWARD, backend=name, source=source, policy=policy) == value


def test_a_backend_down_at_start_is_asked_once_it_is_identified(
    gateway_factory: GatewayFactory, slow_profile: Path, logs: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    gw, _ = start(gateway_factory, f"http://127.0.0.1:{port}", slow_profile)
    assert engine(gw)["forward_priority_source"] == "unknown"
    assert not said(logs, "the admission tier as the request priority")
    with serve_in_thread(time_scale=50.0, scheduling_policy="priority", dev_mode=True, port=port):
        wait_for(
            lambda: engine(gw)["forward_priority"],
            lambda on: on is True,
            timeout=20,
            describe="the tier forwarded once the backend is identified",
        )
    assert forward_series(gw, source="detected", policy="priority") == 1
    assert len(said(logs, "forwarding the admission tier")) == 1


def test_a_backend_restarted_with_another_policy_is_asked_again(
    gateway_factory: GatewayFactory, slow_profile: Path, logs: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    with serve_in_thread(time_scale=50.0, scheduling_policy="fcfs", dev_mode=True, port=port):
        gw, rec = start(
            gateway_factory,
            f"http://127.0.0.1:{port}",
            slow_profile,
            **{"backend.metrics_interval_s": 0.1},
        )
        assert engine(gw)["scheduling_policy"] == "fcfs"
    wait_for(
        lambda: httpx.get(gw.url + "/saber/status").json()["backend"],
        lambda state: state["last_scrape_error"] is not None,
        timeout=10,
        describe="the gateway noticing that nothing listens",
    )
    with serve_in_thread(time_scale=50.0, scheduling_policy="priority", dev_mode=True, port=port):
        wait_for(
            lambda: engine(gw)["forward_priority"],
            lambda on: on is True,
            timeout=20,
            describe="the tier forwarded once the restarted engine is asked again",
        )
    assert engine(gw)["scheduling_policy"] == "priority"
    assert rec.gets.count("/server_info") == 2
    assert forward_series(gw, source="detected", policy="priority") == 1
    lines = said(logs, "the admission tier as the request priority")
    assert [r.getMessage().split(":")[0] for r in lines] == [
        "not forwarding the admission tier as the request priority",
        "forwarding the admission tier as the request priority",
    ]
