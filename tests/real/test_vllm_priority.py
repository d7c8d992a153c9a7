"""``forward_priority: auto`` against genuine vLLM: its developer-mode ``/server_info``
says fcfs (the session's engine runs vLLM's default), and the gateway decides off.

Run with ``.venv/bin/pytest -q -m vllm tests/real/test_vllm_priority.py``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest
from real_support import MESSAGES, client_for

from harness import EngineProcess, metric_value
from saber.backend import scheduling_policy
from saber.config import load_gateway_config
from saber.gateway import settings_from_config, start_in_thread
from saber.gateway.observe.logs import GATEWAY_LOGGER

pytestmark = pytest.mark.vllm

# vLLM's first /server_info collects a system report (pip, GPU tools): seconds on 2 cores.
INFO_TIMEOUT_S = 120.0


async def _policy(url: str) -> str | None:
    async with httpx.AsyncClient(timeout=INFO_TIMEOUT_S) as client:
        return await scheduling_policy(client, url)


def test_vllm_says_fcfs_and_auto_forwards_nothing(
    vllm_engine: EngineProcess, real_profile: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = vllm_engine.base_url
    resp = httpx.get(url + "/server_info", params={"config_format": "json"}, timeout=INFO_TIMEOUT_S)
    assert resp.status_code == 200, "the session's vLLM runs with VLLM_SERVER_DEV_MODE=1"
    assert resp.json()["vllm_config"]["scheduler_config"]["policy"] == "fcfs"
    assert asyncio.run(_policy(url)) == "fcfs"
    # Under fcfs a priority is accepted and ignored: sending one cannot tell the policy.
    body = {"model": vllm_engine.model, "messages": MESSAGES, "max_tokens": 2, "priority": 1}
    assert httpx.post(url + "/v1/chat/completions", json=body, timeout=60).status_code == 200

    caplog.set_level(logging.INFO, logger=GATEWAY_LOGGER)
    overrides = {
        "backend.url": url,
        "profile": str(real_profile),
        "backend.forward_priority": "auto",
        "backend.metrics_interval_s": 0,
        "backend.connect_timeout_s": 30.0,
    }
    gw = start_in_thread(
        settings_from_config(load_gateway_config(env={}, overrides=overrides)), timeout=90
    )
    try:
        status = httpx.get(gw.url + "/saber/status", timeout=10).json()["backend"]
        reply = client_for(gw.url + "/v1").chat.completions.create(
            model=vllm_engine.model, messages=MESSAGES, max_tokens=2
        )
        text = httpx.get(gw.url + "/metrics", timeout=10).text
    finally:
        gw.stop()
    assert reply.choices[0].message is not None
    assert status["kind"] == "vllm"
    assert (status["forward_priority"], status["forward_priority_source"]) == (False, "detected")
    assert status["scheduling_policy"] == "fcfs"
    forward = metric_value(text, "saber_backend_forward_priority", source="detected", policy="fcfs")
    assert forward == 0
    lines = [r.getMessage() for r in caplog.records if "request priority" in r.getMessage()]
    assert lines == [
        "not forwarding the admission tier as the request priority: the engine runs "
        "--scheduling-policy fcfs"
    ]
