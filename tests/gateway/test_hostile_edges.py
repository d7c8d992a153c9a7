"""Two edges found by probing the gateway with hostile requests (issue 49): a redirect
built from the client's Host header, and a client's X-Real-IP taken to the backend."""

from __future__ import annotations

import httpx
import pytest
from fake_vllm import MODEL, FakeVllm
from gateway_support import GatewayFactory, start_fake


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions/", "/v1/completions/", "/v1/models/", "/health/"]
)
def test_a_trailing_slash_is_not_redirected_to_the_clients_host(
    gateway_factory: GatewayFactory, path: str
) -> None:
    """Starlette's trailing-slash redirect took its Location from the Host header: a 307
    to http://evil.example/... for anyone who asked. Now a 404 (or 405), in OpenAI's
    shape, and nothing reaches the backend."""
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    for method in ("POST", "GET"):
        resp = httpx.request(
            method, gw.url + path, json=body, headers={"host": "evil.example"}, timeout=10
        )
        # 404, or 405 where a route of that shape takes another method (GET /v1/models/{id})
        assert resp.status_code in (404, 405), (method, resp.status_code, resp.headers)
        assert "location" not in resp.headers
        assert "evil.example" not in resp.text
        assert resp.json()["error"]["message"]  # GET /v1/models/: model '' not found
    assert fake.posts == []


def test_the_clients_x_real_ip_is_replaced_by_its_address(
    gateway_factory: GatewayFactory,
) -> None:
    """A client's X-Real-IP went to the backend verbatim, which logs it (or rate-limits
    by it) as the client's address. Now it is the peer the gateway saw, as X-Forwarded-For
    has the peer appended; repeated, it is still one value."""
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake)
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
    spoofed = [("x-real-ip", "203.0.113.7"), ("X-Real-IP", "198.51.100.1")]
    resp = httpx.post(gw.url + "/v1/completions", json=body, headers=spoofed, timeout=10)
    assert resp.status_code == 200
    got = fake.posts[0][1]
    assert got.get_list("x-real-ip") == ["127.0.0.1"]
    assert got["x-forwarded-for"] == "127.0.0.1"
    httpx.post(gw.url + "/v1/completions", json=body, timeout=10)
    assert fake.posts[1][1].get_list("x-real-ip") == ["127.0.0.1"]
