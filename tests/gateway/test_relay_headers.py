from __future__ import annotations

from saber.gateway.upstream import upstream_headers


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
