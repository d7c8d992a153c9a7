"""scheduling_policy: what the engine says of its --scheduling-policy, or None."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Literal

import httpx
import pytest
from fake_engines import llamacpp_app, serve_app, vllm_app
from fastapi import FastAPI

from harness import free_port
from saber.backend import BackendError, policy_of, scheduling_policy
from saber.sim.http import serve_in_thread

# The start of genuine vLLM 0.32's answer with VLLM_SERVER_DEV_MODE=1 (its pydantic dump
# of VllmConfig: every sub-config by its field name).
VLLM_INFO = {
    "vllm_config": {
        "model_config": {"model": "/models/tiny", "max_model_len": 2048},
        "cache_config": {"block_size": 16},
        "scheduler_config": {"max_num_seqs": 64, "policy": "priority", "runner_type": "generate"},
    },
    "vllm_env": {"VLLM_SERVER_DEV_MODE": True},
    "system_env": {"torch_version": "2.9.0"},
}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as c:
        yield c


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
async def test_saber_sim_in_developer_mode_says_its_policy(
    client: httpx.AsyncClient, policy: Literal["fcfs", "priority"]
) -> None:
    with serve_in_thread(dev_mode=True, scheduling_policy=policy) as sim:
        assert await scheduling_policy(client, sim.url + "/") == policy


async def test_engines_that_do_not_say(client: httpx.AsyncClient) -> None:
    with serve_in_thread(scheduling_policy="priority") as sim:  # no developer mode
        assert await scheduling_policy(client, sim.url) is None
    for app in (vllm_app(), llamacpp_app()):
        with serve_app(app) as url:
            assert await scheduling_policy(client, url) is None


def _info_app(body: Any, delay_s: float = 0.0) -> FastAPI:
    app = FastAPI()

    @app.get("/server_info")
    async def server_info(config_format: str = "text") -> Any:
        await asyncio.sleep(delay_s)
        return body if config_format == "json" else {"vllm_config": "model='x'"}

    return app


async def test_read_from_vllms_dump(client: httpx.AsyncClient) -> None:
    with serve_app(_info_app(VLLM_INFO)) as url:
        assert await scheduling_policy(client, url) == "priority"


@pytest.mark.parametrize(
    "body",
    [
        {"vllm_config": {"scheduler_config": {"policy": "lifo"}}},
        {"vllm_config": {"scheduler_config": {}}},
        {"vllm_config": "model='x', policy=priority"},
        {"scheduler_config": {"policy": "priority"}},
        ["priority"],
    ],
)
def test_anything_else_is_not_a_policy(body: Any) -> None:
    assert policy_of(body) is None


async def test_unreachable_or_too_slow_is_an_error(client: httpx.AsyncClient) -> None:
    with pytest.raises(BackendError, match="cannot reach"):
        await scheduling_policy(client, f"http://127.0.0.1:{free_port()}")
    with serve_app(_info_app(VLLM_INFO, delay_s=2.0)) as url:
        with pytest.raises(BackendError, match="/server_info"):
            await scheduling_policy(client, url, timeout_s=0.2)
        # The client's own timeout (5 s) lets it answer.
        assert await scheduling_policy(client, url) == "priority"
