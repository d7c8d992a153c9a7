"""Request bodies: what is checked, what is rewritten, and what passes untouched."""

from __future__ import annotations

import json

import pytest

from saber.backend import BackendKind
from saber.gateway.edge.payload import parse
from saber.gateway.errors import GatewayError
from saber.gateway.upstream.dialect import DIALECTS

LLAMACPP = DIALECTS[BackendKind.LLAMACPP]


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
        parse("chat", body(messages=[{}], max_completion_tokens=20, max_tokens=50)).max_tokens == 50
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


def test_min_tokens_is_a_floor_where_the_engine_honours_it() -> None:
    for kind in (BackendKind.VLLM, BackendKind.SIM):
        p = parse("completions", body(prompt="x", max_tokens=400, min_tokens=300), DIALECTS[kind])
        assert p.min_tokens == 300
    assert parse("completions", body(prompt="x", min_tokens=300)).min_tokens == 300
    # Never above the cap; null is no floor; anything but a token count is a 400.
    assert parse("chat", body(messages=[{}], max_tokens=10, min_tokens=300)).min_tokens == 10
    assert parse("completions", body(prompt="x", min_tokens=None)).min_tokens == 0
    for bad in ("300", -3, True, 2.5, 2**24 + 1):
        with pytest.raises(GatewayError) as info:
            parse("completions", body(prompt="x", max_tokens=100, min_tokens=bad))
        assert info.value.param == "min_tokens"


def test_llamacpp_ignores_min_tokens() -> None:
    p = parse("completions", body(prompt="x", max_tokens=400, min_tokens=300), LLAMACPP)
    assert p.min_tokens == 0


def test_llamacpp_reads_n_predict_and_minus_one() -> None:
    def cap(**fields: object) -> int | None:
        return parse("completions", body(prompt="x", **fields), LLAMACPP).max_tokens

    assert cap(n_predict=30, max_tokens=500) == 30  # n_predict wins
    assert cap(n_predict=-1, max_tokens=500) is None  # -1: no cap
    assert cap(max_tokens=-1) is None
    assert cap(max_tokens=-1, max_completion_tokens=40) == 40
    assert cap(max_tokens=50) == 50
    for fields, param in (({"n_predict": -2}, "n_predict"), ({"n_predict": "9"}, "n_predict")):
        with pytest.raises(GatewayError) as info:
            cap(**fields)
        assert info.value.status == 400 and info.value.param == param
    # vLLM does not know n_predict: it passes through, unread.
    assert parse("completions", body(prompt="x", n_predict=30, max_tokens=500)).max_tokens == 500
