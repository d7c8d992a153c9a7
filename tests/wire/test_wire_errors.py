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
        (b'{"detail": "Not Found"}', "Not Found"),  # FastAPI's
        (b'{"detail": [{"loc": 1}]}', '{"detail": [{"loc": 1}]}'),
        (b"Internal Server Error", "Internal Server Error"),
        (b"", "(empty body)"),
        (b"\xff\xfe", "\ufffd\ufffd"),
        ({"error": {"message": "parsed"}}, "parsed"),
        ([1, 2], "[1, 2]"),
    ],
)
def test_error_message(body: object, message: str) -> None:
    assert wire.error_message(body) == message


@pytest.mark.parametrize(
    ("body", "status", "expected"),
    [
        # vLLM: its exception's name and the status as code
        (
            b'{"error": {"message": "too long", "type": "BadRequestError", "param": "max_tokens",'
            b' "code": 400}}',
            400,
            ("too long", "invalid_request_error", "max_tokens", "backend_rejected"),
        ),
        # llama.cpp: an integer code, OpenAI's type
        (
            b'{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}',
            503,
            ("Loading model", "server_error", None, "backend_rejected"),
        ),
        # FastAPI's own 404, as saber-sim answered a route it lacks
        (
            b'{"detail": "Not Found"}',
            404,
            ("Not Found", "not_found_error", None, "backend_rejected"),
        ),
        (b"Bad Gateway", 502, ("Bad Gateway", "server_error", None, "backend_rejected")),
        # OpenAI's own: kept as it is
        (
            {"error": {"message": "m", "type": "rate_limit_error", "param": None, "code": "q"}},
            429,
            ("m", "rate_limit_error", None, "q"),
        ),
    ],
)
def test_openai_error_keeps_the_message_in_openai_shape(
    body: object, status: int, expected: tuple[object, ...]
) -> None:
    """Issue 48: every error a client gets has one shape, the backend's message kept."""
    out = wire.openai_error(body, status, code="backend_rejected")
    err = out["error"]
    assert (err["message"], err["type"], err["param"], err["code"]) == expected
    assert wire.is_openai_error(out)


@pytest.mark.parametrize(
    "body",
    [
        {"detail": "Not Found"},
        {"error": {"message": "x", "type": "BadRequestError", "param": None, "code": None}},
        {"error": {"message": "x", "type": "invalid_request_error", "param": None, "code": 400}},
        {"error": {"message": "", "type": "invalid_request_error", "param": None, "code": None}},
        {"error": {"message": "x", "type": "invalid_request_error", "code": None}},
        {"error": "plain"},
    ],
)
def test_is_openai_error_refuses_other_shapes(body: object) -> None:
    assert not wire.is_openai_error(body)


def test_stream_error_has_the_whole_answers_shape() -> None:
    event = wire.stream_error("gone", 503, code="drain_timeout")
    assert wire.is_openai_error(event) and event["error"]["type"] == "server_error"
    completions = wire.stream_error("gone", 503, completions=True)
    assert wire.is_openai_error(completions) and completions["choices"][0]["finish_reason"]


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
