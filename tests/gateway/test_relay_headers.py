from __future__ import annotations

from saber.gateway.upstream.client import upstream_headers


def test_hop_by_hop_and_private_headers_stay_at_the_gateway():
    client = [
        (b"host", b"gateway:8080"),
        (b"connection", b"keep-alive, x-trace-hop"),
        (b"keep-alive", b"timeout=5"),
        (b"te", b"trailers"),
        (b"upgrade", b"h2c"),
        (b"proxy-authorization", b"Basic abc"),
        (b"x-trace-hop", b"1"),  # named in Connection: hop-by-hop too
        (b"authorization", b"Bearer client-key"),
        (b"x-saber-task", b"code_qna"),
        (b"content-length", b"12"),
        (b"user-agent", b"continue/1.0"),
        (b"x-request-id", b"abc"),
    ]
    out = dict(upstream_headers(client, api_key="backend-key"))
    for dropped in (
        b"host", b"connection", b"keep-alive", b"te", b"upgrade", b"proxy-authorization",
        b"x-trace-hop", b"x-saber-task", b"content-length",
    ):  # fmt: skip
        assert dropped not in out, dropped
    assert out[b"authorization"] == b"Bearer backend-key"  # never the client's key
    assert out[b"user-agent"] == b"continue/1.0" and out[b"x-request-id"] == b"abc"
    assert out[b"content-type"] == b"application/json"


def test_no_backend_key_sends_no_authorization():
    out = dict(upstream_headers([(b"authorization", b"Bearer client-key")], api_key=None))
    assert b"authorization" not in out


# -- through a running gateway ------------------------------------------------------

import httpx  # noqa: E402
import pytest  # noqa: E402
from fake_vllm import MODEL, FakeVllm  # noqa: E402
from gateway_support import GatewayFactory, start_fake  # noqa: E402


def test_proxy_headers_are_appended_and_cookies_dropped(gateway_factory: GatewayFactory) -> None:
    """Defect 8 (issue 14): the client's X-Forwarded-For, Forwarded, Via and Cookie went
    to the backend verbatim and the gateway added none of its own. Now it appends the
    client's address and itself as a reverse proxy does, sets X-Forwarded-Proto and
    -Host to what it saw, and drops Cookie."""
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake)
    sent = {
        "x-forwarded-for": "203.0.113.9",
        "x-forwarded-proto": "https",
        "forwarded": "for=203.0.113.9;proto=https",
        "via": "1.1 edge",
        "cookie": "session=secret",
        "x-request-id": "abc",
    }
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
    assert httpx.post(gw.url + "/v1/completions", json=body, headers=sent).status_code == 200
    got = fake.posts[0][1]
    host = gw.url.removeprefix("http://")
    assert got["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"
    assert got["x-forwarded-proto"] == "http"
    assert got["x-forwarded-host"] == host
    assert (
        got["forwarded"] == f'for=203.0.113.9;proto=https, for=127.0.0.1;proto=http;host="{host}"'
    )
    assert got["via"] == "1.1 edge, 1.1 saber-gateway"
    assert "cookie" not in got
    assert got["x-request-id"] == "abc"
    # With none of its own, the client's address alone.
    httpx.post(gw.url + "/v1/completions", json=body)
    got = fake.posts[1][1]
    assert got["x-forwarded-for"] == "127.0.0.1" and got["via"] == "1.1 saber-gateway"


def test_forwarded_quotes_ipv6_and_joins_repeated_headers() -> None:
    from saber.gateway.edge.forwarding import headers as forwarded

    scope = {
        "headers": [(b"x-forwarded-for", b"10.0.0.1"), (b"x-forwarded-for", b"10.0.0.2")],
        "client": ("::1", 5000),
        "scheme": "https",
        "http_version": "1.1",
    }
    out = dict(forwarded(scope))
    assert out[b"x-forwarded-for"] == b"10.0.0.1, 10.0.0.2, ::1"
    assert out[b"forwarded"] == b'for="[::1]";proto=https'
    assert b"x-forwarded-host" not in out


@pytest.mark.parametrize("status", [429, 503])
def test_the_backends_retry_after_reaches_the_client(
    gateway_factory: GatewayFactory, status: int
) -> None:
    """Defect 6 (issue 14), first half: a backend 429 with ``Retry-After: 7`` reached the
    client without it. A 4xx passes through with it; a 503 keeps it too."""
    error = {"error": {"message": "slow down", "type": "rate_limit_error", "code": status}}
    fake = FakeVllm(reply=(status, error, {"retry-after": "7"}))
    gw = start_fake(gateway_factory, fake)
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
    resp = httpx.post(gw.url + "/v1/completions", json=body)
    assert resp.status_code == status
    assert resp.headers["retry-after"] == "7"
    # An HTTP-date is passed as it came; a value that is neither is not passed.
    fake.reply = (status, error, {"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"})
    resp = httpx.post(gw.url + "/v1/completions", json=body)
    assert resp.headers["retry-after"] == "Wed, 21 Oct 2026 07:28:00 GMT"
    fake.reply = (status, error, {"retry-after": "soon"})
    resp = httpx.post(gw.url + "/v1/completions", json=body)
    assert resp.headers.get("retry-after") == ("1" if status == 503 else None)


def test_an_unreachable_backend_on_the_alias_path_says_retry_after(
    gateway_factory: GatewayFactory,
) -> None:
    """Defect 6 (issue 14), second half: an alias without a model asks the backend for
    its model first; when the backend was down that 503 backend_unavailable had no
    Retry-After (the direct path's had)."""
    import socket

    s = socket.socket()  # a port nothing listens on
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    gw = gateway_factory(dead, **{"backend.kind": "vllm", "backend.metrics_interval_s": 0})
    for model in ("chat", "m"):  # an alias with no model; a plain name (the direct path)
        resp = httpx.post(gw.url + "/v1/completions", json={"model": model, "prompt": "x"})
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"] == "backend_unavailable"
        assert resp.headers["retry-after"] == "1"
