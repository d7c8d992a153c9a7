"""Access: with keys set, every route but liveness and readiness needs one; /metrics
has its own setting; keys may be objects that limit task types and max_tokens, and
metrics name keys by their configured names only."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fake_vllm import MODEL, FakeVllm
from gateway_support import GatewayFactory, start_fake
from prometheus_client.parser import text_string_to_metric_families

from harness import metric_value
from saber.config import ConfigError, load_gateway_config
from saber.gateway import RunningGateway

KEYS: list[Any] = [
    "sk-plain",
    {"name": "editor", "key": "sk-editor", "tasks": ["code_completion"], "max_tokens": 32},
    {"name": "chat", "key": "sk-chat", "tasks": ["code_qna", "code_generation"],
     "default_task": "code_qna"},
]  # fmt: skip


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture
def fake() -> FakeVllm:
    return FakeVllm()


@pytest.fixture
def gw(gateway_factory: GatewayFactory, fake: FakeVllm) -> RunningGateway:
    return start_fake(gateway_factory, fake, api_keys=KEYS, metrics_keys=["sk-prometheus"])


def test_saber_status_needs_a_key(gateway_factory: GatewayFactory, fake: FakeVllm) -> None:
    """Defect 5 (issue 14): with api_keys set, /saber/status answered anyone, with the
    backend's URL, the profile's path, the scheduler's seed and recent decisions."""
    gw = start_fake(gateway_factory, fake, api_keys=["sk-one"])
    resp = httpx.get(gw.url + "/saber/status")
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "invalid_api_key"
    assert "vllm.invalid" not in resp.text
    assert httpx.get(gw.url + "/saber/status", headers=auth("sk-one")).status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/saber/status"),
        ("GET", "/health"),
        ("GET", "/v1/models"),
        ("GET", "/metrics"),
        ("GET", "/no/such/route"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/v1/completions"),
    ],
)
def test_every_route_needs_a_key(gw: RunningGateway, method: str, path: str) -> None:
    for headers in ({}, auth("sk-wrong"), {"authorization": "Basic c2stcGxhaW4="}):
        resp = httpx.request(method, gw.url + path, headers=headers, json={"prompt": "x"})
        assert resp.status_code == 401, (path, resp.text)
        assert resp.headers["www-authenticate"] == "Bearer"
        assert resp.json()["error"]["type"] == "authentication_error"
    resp = httpx.request(method, gw.url + path, headers=auth("sk-plain"), json={"prompt": "x"})
    assert resp.status_code != 401


def test_liveness_and_readiness_need_none(gw: RunningGateway) -> None:
    assert httpx.get(gw.url + "/health/live").json() == {"status": "ok"}
    ready = httpx.get(gw.url + "/health/ready")
    assert ready.status_code == 200 and ready.json() == {"status": "ok"}


def test_metrics_take_a_client_key_or_a_scraper_key(gw: RunningGateway) -> None:
    assert httpx.get(gw.url + "/metrics", headers=auth("sk-prometheus")).status_code == 200
    assert httpx.get(gw.url + "/metrics", headers=auth("sk-chat")).status_code == 200
    # The scraper's key is not a client key.
    body = {"model": MODEL, "prompt": "x"}
    resp = httpx.post(gw.url + "/v1/completions", json=body, headers=auth("sk-prometheus"))
    assert resp.status_code == 401
    text = httpx.get(gw.url + "/metrics", headers=auth("sk-prometheus")).text
    assert metric_value(text, "saber_requests_total", outcome="unauthorized") == 1
    assert metric_value(text, "saber_auth_failures_total") == 0


def test_metrics_public(gateway_factory: GatewayFactory, fake: FakeVllm) -> None:
    gw = start_fake(gateway_factory, fake, api_keys=["sk-one"], metrics_public=True)
    assert httpx.get(gw.url + "/metrics").status_code == 200
    assert httpx.get(gw.url + "/saber/status").status_code == 401
    alone = start_fake(gateway_factory, fake, metrics_keys=["sk-prometheus"])
    assert httpx.get(alone.url + "/metrics").status_code == 401
    assert httpx.get(alone.url + "/metrics", headers=auth("sk-prometheus")).status_code == 200
    assert httpx.get(alone.url + "/saber/status").status_code == 200  # no client keys


def test_a_key_limited_to_a_task_type(gw: RunningGateway, fake: FakeVllm) -> None:
    url = gw.url + "/v1/completions"
    body = {"model": MODEL, "prompt": "x", "max_tokens": 500}
    # Named by header or alias: another task type is refused.
    for extra, param in (
        ({"headers": {"x-saber-task": "code_generation"}}, "X-Saber-Task"),
        ({"json": {**body, "model": f"{MODEL}:code_qna"}}, "model"),
        ({"json": {**body, "model": "chat"}}, "model"),
    ):
        kwargs: dict[str, Any] = {"json": body, **extra}
        kwargs["headers"] = {**auth("sk-editor"), **kwargs.get("headers", {})}
        resp = httpx.post(url, **kwargs)
        assert resp.status_code == 403, resp.text
        err = resp.json()["error"]
        assert err["type"] == "permission_error" and err["code"] == "task_not_allowed"
        assert err["param"] == param
        assert resp.headers["x-saber-outcome"] == "forbidden"
    # Named by nobody: the key's task, with its cap on max_tokens.
    resp = httpx.post(url, json=body, headers=auth("sk-editor"))
    assert resp.status_code == 200 and resp.headers["x-saber-task"] == "code_completion"
    assert fake.posts[-1][0]["max_tokens"] == 32
    resp = httpx.post(
        url, json=body, headers={**auth("sk-editor"), "x-saber-task": "code_completion"}
    )
    assert resp.status_code == 200
    # The chat key: its default where the rule or the default task would not do.
    resp = httpx.post(url, json={**body, "max_tokens": 10}, headers=auth("sk-chat"))
    assert resp.headers["x-saber-task"] == "code_qna"  # the rule's code_completion: not its
    resp = httpx.post(url, json=body, headers=auth("sk-chat"))
    assert resp.headers["x-saber-task"] == "code_generation"  # the default task: allowed
    # The plain key may do anything.
    resp = httpx.post(url, json=body, headers={**auth("sk-plain"), "x-saber-task": "code_qna"})
    assert resp.status_code == 200


def test_metrics_name_keys_not_secrets(gw: RunningGateway) -> None:
    body = {"model": MODEL, "prompt": "x", "max_tokens": 3}
    for key in ("sk-plain", "sk-editor", "sk-chat", "sk-chat", "sk-nope"):
        httpx.post(gw.url + "/v1/completions", json=body, headers=auth(key))
    text = httpx.get(gw.url + "/metrics", headers=auth("sk-plain")).text
    assert "sk-" not in text
    keys = {
        s.labels["key"]
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "saber_key_requests_total"
    }
    assert keys == {"key1", "editor", "chat"}
    assert metric_value(text, "saber_key_requests_total", key="chat", outcome="served") == 2
    status = httpx.get(gw.url + "/saber/status", headers=auth("sk-plain")).text
    assert "sk-" not in status


def test_tokens_are_compared_with_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """No early exit: the last key matches as the first does (constant work per token)."""
    import saber.gateway.edge.access as module

    cfg = load_gateway_config(env={}, overrides={"api_keys": [f"sk-{i}" for i in range(50)]})
    access = module.Access(cfg)
    calls = 0
    real = module.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        nonlocal calls
        calls += 1
        return real(a, b)

    monkeypatch.setattr(module.hmac, "compare_digest", counting)
    for token in ("sk-0", "sk-49", "nope"):
        scope = {"headers": [(b"authorization", f"Bearer {token}".encode())]}
        try:
            access.client(scope)
            refused = False
        except Exception:
            refused = True
        assert refused == (token == "nope"), token
        assert calls == 50
        calls = 0


@pytest.mark.parametrize(
    "keys",
    [
        [{"key": "a", "tasks": ["no_such_task"]}],
        [{"key": "a", "tasks": ["code_qna"], "default_task": "code_generation"}],
        [{"name": "x", "key": "a"}, {"name": "x", "key": "b"}],
        ["same", {"key": "same"}],
        [{"name": "bad name!", "key": "a"}],
    ],
)
def test_bad_keys_are_refused_at_start(keys: list[Any]) -> None:
    with pytest.raises(ConfigError):
        load_gateway_config(env={}, overrides={"api_keys": keys})


def test_keys_from_the_environment() -> None:
    env = {"SABER_API_KEYS": "sk-a, sk-b", "SABER_METRICS_KEYS": "sk-m"}
    cfg = load_gateway_config(env=env)
    assert [k.name for k in cfg.client_keys()] == ["key1", "key2"]
    env = {"SABER_API_KEYS": '[{"name": "ed", "key": "sk-e", "tasks": ["code_completion"]}]'}
    (key,) = load_gateway_config(env=env).client_keys()
    assert key.name == "ed" and key.tasks == ["code_completion"]
    assert "sk-e" not in repr(key)
