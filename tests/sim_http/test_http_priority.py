"""The request's ``priority`` and ``--scheduling-policy``, as vLLM has them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from saber.engine import EngineRequest
from saber.sim.http import SimState, create_app
from saber.sim.http.cli import build_parser, settings_from_args


def _client(*argv: str) -> TestClient:
    """An app built from saber-sim's command line, as ``saber-sim ARGV`` would build it."""
    settings = settings_from_args(build_parser().parse_args(["--time-scale", "50", *argv]))
    return TestClient(create_app(settings))


def _priorities(sim: SimState, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The priority of every engine request the app submits from now on."""
    seen: list[int] = []
    submit = sim.driver.submit

    def spy(req: EngineRequest, sink: Any) -> None:
        seen.append(req.priority)
        submit(req, sink)

    monkeypatch.setattr(sim.driver, "submit", spy)
    return seen


@pytest.fixture
def priority_client() -> Iterator[TestClient]:
    with _client("--scheduling-policy", "priority") as client:
        yield client


def test_priority_policy_serves_a_request_with_a_priority(
    priority_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim: SimState = priority_client.app.state.sim  # type: ignore[attr-defined]
    assert sim.engine.scheduling_policy == "priority"
    assert priority_client.get("/sim/state").json()["scheduling_policy"] == "priority"
    seen = _priorities(sim, monkeypatch)
    body = {"prompt": "x", "max_tokens": 3, "ignore_eos": True, "n": 2, "priority": 1}
    resp = priority_client.post("/v1/completions", json=body)
    assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 6
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "priority": -3}
    assert priority_client.post("/v1/chat/completions", json=chat).status_code == 200
    assert seen == [1, 1, -3]  # every choice carries it into the engine


@pytest.mark.parametrize("value", ["1", 1.5, True, None, [1]])
def test_a_non_integer_priority_is_a_400(priority_client: TestClient, value: object) -> None:
    resp = priority_client.post(
        "/v1/completions", json={"prompt": "x", "max_tokens": 1, "priority": value}
    )
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["type"] == "BadRequestError" and err["code"] == 400
    assert err["param"] == "priority" and "priority" in err["message"]


def test_fcfs_accepts_a_priority_and_ignores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with _client() as client:
        sim: SimState = client.app.state.sim  # type: ignore[attr-defined]
        assert sim.engine.scheduling_policy == "fcfs"
        assert client.get("/sim/state").json()["scheduling_policy"] == "fcfs"
        seen = _priorities(sim, monkeypatch)
        body = {"prompt": "x", "max_tokens": 2, "ignore_eos": True, "priority": 5}
        resp = client.post("/v1/completions", json=body)
        assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 2
        resp = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
        assert resp.status_code == 200
    assert seen == [5, 0]  # passed on (the default is 0); the fcfs engine does not look
