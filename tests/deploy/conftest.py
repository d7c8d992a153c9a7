"""A real saber-sim and saber-gateway (shipped config) that have served requests."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from deploy_support import SERVED_MODEL, Stack, find_tool

from saber.config import load_gateway_config
from saber.gateway import settings_from_config, start_in_thread
from saber.sim.http import serve_in_thread


def _serve_some(url: str) -> None:
    """One request per way of naming a task, streaming and not, on both endpoints."""
    chat = [{"role": "user", "content": "How do I reverse a list?"}]
    calls: list[tuple[str, dict[str, object], dict[str, str]]] = [
        ("chat/completions", {"model": "chat", "messages": chat, "stream": True}, {}),
        ("chat/completions", {"model": "generate", "messages": chat}, {}),
        ("completions", {"model": "autocomplete", "prompt": "def f(", "stream": True}, {}),
        ("completions", {"model": SERVED_MODEL, "prompt": "x"}, {"X-Saber-Task": "code_summary"}),
        ("chat/completions", {"model": f"{SERVED_MODEL}:code_translation", "messages": chat}, {}),
    ]
    with httpx.Client(base_url=url + "/v1", timeout=30) as client:
        for path, body, headers in calls:
            r = client.post(path, json={**body, "max_tokens": 8}, headers=headers)
            assert r.status_code == 200, r.text


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    with serve_in_thread(time_scale=20.0, served_model_name=(SERVED_MODEL,)) as sim:
        cfg = load_gateway_config(env={}, overrides={"backend.url": sim.url, "log_requests": False})
        with start_in_thread(settings_from_config(cfg)) as gw:
            _serve_some(gw.url)
            yield Stack(sim, gw, cfg)


@pytest.fixture(scope="session")
def promtool() -> str:
    found = find_tool("promtool")
    if found is None:
        pytest.skip("promtool not on PATH (Debian: apt-get install prometheus)")
    return found
