"""An error quotes at most 100 characters of what the client sent, and says how long it
was: a 60 KB task header is not sent back whole."""

from __future__ import annotations

import httpx
import pytest
from fake_vllm import FakeVllm
from gateway_support import GatewayFactory, start_fake

from saber.gateway import RunningGateway
from saber.gateway.errors import quote

LONG = "x" * 60_000
KEY = LONG.encode()
SHOWN = repr("x" * 100) + "... (60,000 characters)"


def test_quote() -> None:
    assert quote("code_qna") == "'code_qna'"
    assert quote(LONG) == SHOWN
    assert quote("a\ud800b") == "'a\\ud800b'"  # escaped, so the message is text
    assert quote(1.5) == "1.5" and quote(-(2**63)) == str(-(2**63))
    assert quote(10**150) == "1" + "0" * 99 + "... (151 characters)"


@pytest.fixture
def gw(gateway_factory: GatewayFactory) -> RunningGateway:
    return start_fake(gateway_factory, FakeVllm())


@pytest.mark.parametrize(
    ("method", "path", "headers", "body"),
    [
        ("POST", "/v1/chat/completions", {"x-saber-task": LONG}, b"{}"),
        ("GET", f"/v1/models/{LONG}", {}, None),
        ("POST", f"/v1/responses/{LONG}/cancel", {}, b"{}"),
        ("POST", "/v1/completions", {}, b'{"prompt": "x", "logit_bias": {"%s": 1}}' % KEY),
        ("POST", "/v1/completions", {}, b'{"prompt": "x", "%s": NaN}' % KEY),
        ("POST", "/v1/completions", {}, b'{"prompt": "x", "%s\\ud800": 1}' % KEY),
        ("POST", "/v1/completions", {}, b'{"prompt": "x", "max_tokens": 1%s}' % (b"0" * 4000)),
    ],
    ids=["task header", "model id", "responses path", "logit_bias key", "key", "surrogate key",
         "integer"],
)  # fmt: skip
def test_errors_quote_at_most_100_characters_of_a_client_value(
    gw: RunningGateway, method: str, path: str, headers: dict[str, str], body: bytes | None
) -> None:
    resp = httpx.request(method, gw.url + path, headers=headers, content=body, timeout=30)
    assert 400 <= resp.status_code < 502, resp.text[:300]
    assert len(resp.content) < 1000, resp.text[:300]
    err = resp.json()["error"]
    assert "... (" in err["message"] and " characters)" in err["message"], err["message"]
    assert err["param"] is None or len(err["param"]) <= 100
