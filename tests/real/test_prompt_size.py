"""A prompt's size at arrival, against real tokenizers: the gateway learns the model's
bytes per token from each answer's ``usage.prompt_tokens`` (vLLM's CPU build and
llama.cpp, each with its own tokenizer), and with ``backend.tokenize`` takes the
engine's own count (vLLM for chats and completions, llama.cpp for completions).

Run with ``.venv/bin/pytest -q -m vllm`` or ``-m llamacpp``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from real_support import client_for

from harness import EngineGateway, EngineProcess, start_gateway

# Code-like text: the tiny models' tokenizers cut it into a few bytes a token.
LINE = "def handle_{i}(request, timeout=30):\n    return dispatch(request.path, {i}, timeout)\n"
REQUESTS = 40


def _prompt(i: int) -> str:
    return "".join(LINE.format(i=i * 7 + k) for k in range(12))


def _learned(gateway: EngineGateway) -> dict[str, float]:
    status: dict[str, float] = httpx.get(gateway.url + "/saber/status", timeout=30).json()
    return status["prompt_size"]


def _check_learns_the_ratio(gateway: EngineGateway) -> None:
    client = client_for(gateway.api_url)
    before = _learned(gateway)["observed"]
    sent = counted = 0
    for i in range(REQUESTS):
        prompt = _prompt(i)
        answer = client.completions.create(model=gateway.engine.model, prompt=prompt, max_tokens=1)
        sent += len(prompt.encode())
        counted += answer.usage.prompt_tokens
    learned = _learned(gateway)
    assert learned["observed"] >= before + REQUESTS
    # From a prior of 4 bytes a token toward this tokenizer's ratio over these prompts
    # (1,000 tokens of prior against about 14,000 counted).
    assert learned["bytes_per_token"] == pytest.approx(sent / counted, rel=0.1)


@pytest.mark.llamacpp
def test_the_ratio_is_learned_from_llamacpp_s_usage(llamacpp_gateway: EngineGateway) -> None:
    _check_learns_the_ratio(llamacpp_gateway)


@pytest.mark.vllm
def test_the_ratio_is_learned_from_vllm_s_usage(vllm_gateway: EngineGateway) -> None:
    _check_learns_the_ratio(vllm_gateway)


@pytest.fixture
def tokenizing(request: pytest.FixtureRequest, real_profile: Path) -> Iterator[EngineGateway]:
    engine: EngineProcess = request.getfixturevalue(request.param)
    gw = start_gateway(engine, real_profile, **{"backend.tokenize": True, "log_requests": True})
    yield gw
    gw.stop()


@pytest.mark.parametrize(
    "tokenizing",
    [
        pytest.param("llamacpp_engine", marks=pytest.mark.llamacpp),
        pytest.param("vllm_engine", marks=pytest.mark.vllm),
    ],
    indirect=True,
)
def test_with_tokenize_the_engine_s_count_is_taken(tokenizing: EngineGateway) -> None:
    """The scheduler took each prompt's size from the engine's own count: the request's
    log line says the same size at arrival as the engine's usage afterwards."""
    client = client_for(tokenizing.api_url)
    for i in range(3):
        client.completions.create(model=tokenizing.engine.model, prompt=_prompt(i), max_tokens=1)
    status = httpx.get(tokenizing.url + "/saber/status", timeout=30).json()
    assert status["prompt_size"]["tokenize"] is True
    lines = [
        json.loads(x) for x in tokenizing.process.log_tail(400).splitlines() if x.startswith("{")
    ]
    served = [x for x in lines if x.get("outcome") == "served" and x.get("prompt_tokens")]
    assert len(served) >= 3, lines[-5:]
    for line in served[-3:]:
        assert line["prompt_tokens_at_arrival"] == line["prompt_tokens"], line
