"""OpenAI error bodies, reading their message back, and the Bearer header."""

from __future__ import annotations

import json

import pytest

from saber import wire


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (404, "not_found_error"),
        (413, "invalid_request_error"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "server_error"),
        (503, "server_error"),
    ],
)
def test_error_type_per_status(status: int, kind: str) -> None:
    assert wire.error_type(status) == kind
    assert wire.error_body("m", status)["error"]["type"] == kind


def test_error_body_shape() -> None:
    body = wire.error_body("bad", 400, code="invalid_request", param="prompt")
    assert body == {
        "error": {
            "message": "bad",
            "type": "invalid_request_error",
            "param": "prompt",
            "code": "invalid_request",
        }
    }
    vllm = wire.error_body("x", 400, code=400, type="BadRequestError")
    assert vllm["error"]["type"] == "BadRequestError" and vllm["error"]["code"] == 400


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": {"message": "too long", "type": "x"}}', "too long"),  # OpenAI, vLLM
        (b'{"error": {"code": 503, "message": "Loading model", "type": "u"}}', "Loading model"),
        (b'{"error": "plain"}', "plain"),
        (b'{"message": "top"}', "top"),
        (b'{"detail": "Not Found"}', '{"detail": "Not Found"}'),
        (b"Internal Server Error", "Internal Server Error"),
        (b"", "(empty body)"),
        (b"\xff\xfe", "\ufffd\ufffd"),
        ({"error": {"message": "parsed"}}, "parsed"),
        ([1, 2], "[1, 2]"),
    ],
)
def test_error_message(body: object, message: str) -> None:
    assert wire.error_message(body) == message


def test_error_message_is_shortened() -> None:
    body = json.dumps({"error": {"message": "x" * 1000}}).encode()
    assert wire.error_message(body, limit=200) == "x" * 200


def test_bearer() -> None:
    assert wire.auth_headers("sk-1") == {"authorization": "Bearer sk-1"}
    assert wire.auth_headers(None) == {} and wire.auth_headers("") == {}
    assert wire.bearer_token("Bearer sk-1 ") == "sk-1"
    assert wire.bearer_token("bearer sk-1") == "sk-1"
    assert wire.bearer_token("Basic abc") is None
    assert wire.bearer_token("") is None
