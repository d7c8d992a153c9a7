"""Request bodies: what is checked, what is rewritten, and what passes untouched."""

from __future__ import annotations

import json

import pytest

from saber.gateway.errors import GatewayError
from saber.gateway.payload import parse


def body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_untouched_bytes_when_nothing_to_rewrite() -> None:
    raw = b'{"model":"m","prompt":"x","max_tokens":3,"vendor_field":{"a":[1,2.50,"\\u00e9"]}}'
    p = parse("completions", raw)
    assert p.upstream_body(None) is raw
    assert p.upstream_body("m") is raw


def test_model_rewrite_keeps_unknown_fields() -> None:
    raw = body(
        model="m:code_qna", messages=[{"role": "user", "content": "hi"}], top_k=5, x={"y": 1}
    )
    out = json.loads(parse("chat", raw).upstream_body("m"))
    assert out == {**json.loads(raw), "model": "m"}


def test_stream_asks_for_usage_and_keeps_other_stream_options() -> None:
    raw = body(
        model="m",
        prompt="x",
        stream=True,
        stream_options={"continuous_usage_stats": False},
    )
    p = parse("completions", raw)
    assert not p.want_usage
    out = json.loads(p.upstream_body(None))
    assert out["stream_options"] == {"continuous_usage_stats": False, "include_usage": True}


def test_client_usage_request_is_remembered() -> None:
    raw = body(model="m", prompt="x", stream=True, stream_options={"include_usage": True})
    p = parse("completions", raw)
    assert p.want_usage and p.upstream_body(None) is raw


def test_max_tokens_and_max_completion_tokens() -> None:
    assert parse("chat", body(messages=[{}], max_tokens=50)).max_tokens == 50
    assert (
        parse("chat", body(messages=[{}], max_completion_tokens=20, max_tokens=50)).max_tokens == 20
    )
    assert parse("chat", body(messages=[{}])).max_tokens is None


@pytest.mark.parametrize(
    ("endpoint", "raw", "param"),
    [
        ("chat", b"{not json", None),
        ("chat", b"", None),
        ("chat", b"[1, 2]", None),
        ("chat", body(model="m"), "messages"),
        ("chat", body(messages="hi"), "messages"),
        ("chat", body(messages=[]), "messages"),
        ("completions", body(model="m"), "prompt"),
        ("completions", body(prompt=3), "prompt"),
        ("completions", body(prompt="x", max_tokens=-1), "max_tokens"),
        ("completions", body(prompt="x", max_tokens="10"), "max_tokens"),
        ("completions", body(prompt="x", max_tokens=True), "max_tokens"),
        ("chat", body(messages=[{}], max_completion_tokens=-5), "max_completion_tokens"),
        ("chat", body(messages=[{}], stream="yes"), "stream"),
        ("chat", body(messages=[{}], stream_options=[1]), "stream_options"),
        ("chat", body(messages=[{}], model=7), "model"),
    ],
)
def test_invalid_bodies_are_400_with_a_named_param(
    endpoint: str, raw: bytes, param: str | None
) -> None:
    with pytest.raises(GatewayError) as info:
        parse(endpoint, raw)  # type: ignore[arg-type]
    err = info.value
    assert err.status == 400
    assert err.body()["error"]["param"] == param
    assert err.body()["error"]["type"] == "invalid_request_error"
