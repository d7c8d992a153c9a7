"""Injected faults: 500s, stalled streams, refused connections."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from saber.sim.http import FaultSettings, RunningSim, serve_in_thread

BODY = {"prompt": "x", "max_tokens": 20, "ignore_eos": True}


def test_error_rate_one_answers_500_like_vllm() -> None:
    with serve_in_thread(time_scale=20, faults=FaultSettings(error_rate=1.0)) as sim:
        resp = httpx.post(f"{sim.api_url}/completions", json=BODY)
        assert resp.status_code == 500
        assert resp.json()["error"]["type"] == "InternalServerError"
        with (
            openai.OpenAI(base_url=sim.api_url, api_key="x", max_retries=0) as client,
            pytest.raises(openai.InternalServerError),
        ):
            client.completions.create(model=sim.model, prompt="x", max_tokens=1)
        assert sim.state.engine.idle


def test_error_rate_is_a_share_and_settable_at_run_time(sim: RunningSim) -> None:
    faults = httpx.post(f"{sim.url}/sim/faults", json={"error_rate": 0.5}).json()
    assert faults["error_rate"] == 0.5
    try:
        with httpx.Client(base_url=sim.api_url) as client:
            body = {**BODY, "max_tokens": 1}
            codes = [client.post("/completions", json=body).status_code for _ in range(60)]
    finally:
        httpx.post(f"{sim.url}/sim/faults", json={"error_rate": 0.0})
    assert set(codes) == {200, 500}
    assert 15 <= codes.count(500) <= 45
    bad = httpx.post(f"{sim.url}/sim/faults", json={"error_rate": 2})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == 400
    assert httpx.post(f"{sim.url}/sim/faults", json={"nope": 1}).status_code == 400


def test_stall_stops_the_stream_after_n_tokens(wait_for: Callable[..., Any]) -> None:
    faults = FaultSettings(stall_prob=1.0, stall_after=3)
    with serve_in_thread(time_scale=20, faults=faults) as sim:
        frames = []
        timeout = httpx.Timeout(5.0, read=0.5)
        with (
            httpx.Client(timeout=timeout) as client,
            client.stream("POST", f"{sim.api_url}/completions", json={**BODY, "stream": True}) as r,
            pytest.raises(httpx.ReadTimeout),
        ):
            for line in r.iter_lines():
                if line.startswith("data: "):
                    frames.append(line)
        assert len(frames) == 3 and "[DONE]" not in frames[-1]
        with pytest.raises(httpx.ReadTimeout):  # a whole response never comes either
            httpx.post(f"{sim.api_url}/completions", json=BODY, timeout=0.5)
        # The engine finished the work; nothing is left running.
        wait_for(lambda: sim.state.engine.idle, describe="the engine idle")


def _refused(url: str) -> bool:
    try:
        httpx.get(f"{url}/health", timeout=2)
    except httpx.ConnectError:
        return True
    return False


def test_refuse_for_at_start_up(wait_for: Callable[..., Any]) -> None:
    with serve_in_thread(time_scale=20, faults=FaultSettings(refuse_for=0.6)) as sim:
        assert _refused(sim.url)
        wait_for(lambda: _refused(sim.url), lambda refused: not refused, timeout=5, step=0.05,
                 describe="saber-sim accepting connections after refuse_for 0.6 s")  # fmt: skip
        assert httpx.post(f"{sim.api_url}/completions", json=BODY).status_code == 200


def test_refuse_for_at_run_time_drops_keep_alive_connections(
    sim: RunningSim, wait_for: Callable[..., Any]
) -> None:
    with httpx.Client(base_url=sim.url, timeout=2) as client:
        assert client.get("/health").status_code == 200
        state = client.post("/sim/faults", json={"refuse_for": 0.5}).json()
        assert state["refusing_for"] > 0
        with pytest.raises(httpx.ConnectError):  # the pooled connection is gone too
            client.get("/health")
        wait_for(lambda: _refused(sim.url), lambda refused: not refused, timeout=5, step=0.05,
                 describe="saber-sim accepting connections after refuse_for 0.5 s")  # fmt: skip
        assert client.get("/health").status_code == 200
        assert client.get("/sim/faults").json()["refusing_for"] == 0
