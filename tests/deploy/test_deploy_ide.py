"""The IDE snippets in configs/ide/ point at the gateway's /v1 and name task types that
the shipped configs/gateway.yaml defines, and the real gateway classifies them so."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from deploy_support import IDE_DIR, REPO, Stack

from saber.config import load_gateway_config
from saber.gateway.edge.tasks import TaskResolver

SHIPPED = load_gateway_config(env={})
TASK_HEADER = "x-saber-task"


@dataclass(frozen=True)
class Client:
    """One model entry of an IDE's config: where it sends what."""

    where: str
    base_url: str
    endpoint: Literal["chat", "completions"]
    model: str
    headers: dict[str, str] = field(default_factory=dict)

    def task_header(self) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == TASK_HEADER), None)


def _continue(path: Path) -> list[Client]:
    doc = yaml.safe_load(path.read_text())
    return [
        Client(
            where=f"continue: {m['name']}",
            base_url=m["apiBase"],
            endpoint="completions" if "autocomplete" in m.get("roles", []) else "chat",
            model=m["model"],
            headers=dict(m.get("requestOptions", {}).get("headers", {})),
        )
        for m in doc["models"]
    ]


def _cline(path: Path) -> list[Client]:
    state = json.loads(path.read_text())
    # Cline's "OpenAI Compatible" provider is "openai" in its state.
    assert state["actModeApiProvider"] == state["planModeApiProvider"] == "openai"
    return [
        Client(
            where=f"cline: {mode} mode",
            base_url=state["openAiBaseUrl"],
            endpoint="chat",
            model=state[f"{mode}ModeOpenAiModelId"],
            headers=dict(state.get("openAiHeaders", {})),
        )
        for mode in ("act", "plan")
    ]


def _tabby(path: Path) -> list[Client]:
    doc = tomllib.loads(path.read_text())
    clients = []
    for role, entry in doc["model"].items():
        http = entry["http"]
        clients.append(
            Client(
                where=f"tabby: {role} ({http['kind']})",
                base_url=http["api_endpoint"],
                endpoint="completions" if http["kind"].endswith("/completion") else "chat",
                model=http["model_name"],
            )
        )
    return clients


READERS: dict[str, Callable[[Path], list[Client]]] = {
    "continue/config.yaml": _continue,
    "cline/globalState.json": _cline,
    "tabby/config.toml": _tabby,
}
CLIENTS = [c for rel, read in READERS.items() for c in read(IDE_DIR / rel)]


def expected_task(client: Client) -> str:
    """What the gateway should pick: the header's task, else the model alias's."""
    resolver = TaskResolver(SHIPPED)
    header = client.task_header()
    if header is not None:
        return resolver.task_for_header(header).name  # raises on an unknown task
    alias = resolver.alias(client.model)
    assert alias is not None, f"{client.where}: {client.model!r} is no alias of gateway.yaml"
    return alias[0].name


def test_every_ide_file_is_read() -> None:
    files = {p.relative_to(IDE_DIR).as_posix() for p in IDE_DIR.rglob("*") if p.is_file()}
    assert files == set(READERS)
    assert {c.where.split(":")[0] for c in CLIENTS} == {"continue", "cline", "tabby"}


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.where)
def test_points_at_the_gateways_v1(client: Client) -> None:
    url = urlsplit(client.base_url)
    assert (url.scheme, url.hostname, url.port, url.path.rstrip("/")) == (
        "http",
        "127.0.0.1",
        SHIPPED.port,
        "/v1",
    )


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.where)
def test_names_a_task_the_shipped_config_defines(client: Client) -> None:
    task = expected_task(client)
    assert task in SHIPPED.tasks
    if client.endpoint == "completions":  # editor autocompletion: the short SLA
        assert task == "code_completion"


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.where)
def test_gateway_classifies_each_client_as_configured(client: Client, stack: Stack) -> None:
    body: dict[str, object] = {"model": client.model, "max_tokens": 8}
    if client.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": "Explain this function."}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = "def add(a, b):"
        path = "/v1/completions"
    r = httpx.post(
        stack.gateway.url + path,
        json=body,
        headers={**client.headers, "Authorization": "Bearer sk-test"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-saber-task"] == expected_task(client)


def test_docs_point_at_the_files() -> None:
    docs = (REPO / "docs" / "gateway.md").read_text()
    for rel in READERS:
        assert f"configs/ide/{rel}" in docs
