"""What a prompt tells the scheduler at the edge: its size and its system prompt's digest."""

from __future__ import annotations

import httpx
import openai
import pytest

from saber.gateway.edge.payload import parse
from saber.gateway.edge.prompt import read_prompt


def test_a_chat_prompt_counts_its_text_and_its_tools_and_names_its_system_prompt():
    body = {
        "messages": [
            {"role": "system", "content": "You are a careful reviewer."},
            {"role": "user", "content": [{"type": "text", "text": "héllo"}, {"type": "image"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "f"}}],
    }
    prompt = read_prompt("chat", body)
    tools = len(b'[{"type":"function","function":{"name":"f"}}]')
    assert prompt.nbytes == len(b"You are a careful reviewer.") + len("héllo".encode()) + tools
    assert prompt.tokens is None
    again = read_prompt(
        "chat", {**body, "messages": [body["messages"][0], {"role": "user", "content": "other"}]}
    )
    assert prompt.fingerprint is not None and again.fingerprint == prompt.fingerprint
    other = read_prompt("chat", {"messages": [{"role": "developer", "content": "Be terse."}]})
    assert other.fingerprint not in (None, prompt.fingerprint)
    assert (
        read_prompt("chat", {"messages": [{"role": "user", "content": "hi"}]}).fingerprint is None
    )


def test_a_completion_prompt_of_token_ids_is_counted_exactly():
    assert read_prompt("completions", {"prompt": "def f():"}).nbytes == 8
    ids = read_prompt("completions", {"prompt": [1, 2, 3, 4]})
    assert (ids.nbytes, ids.tokens) == (0, 4)
    lists = read_prompt("completions", {"prompt": [[1, 2], [3, 4, 5]]})
    assert lists.tokens == 5
    strings = read_prompt("completions", {"prompt": ["ab", "cde"]})
    assert (strings.nbytes, strings.tokens) == (5, None)


def test_the_checked_payload_carries_its_prompt():
    payload = parse("chat", b'{"model": "m", "messages": [{"role": "user", "content": "abc"}]}')
    assert payload.prompt.nbytes == 3


def test_the_gateway_learns_the_model_s_bytes_per_token_from_usage(gateway, sim):
    """saber-sim counts a token per word and 4 per chat message: prompts of 300
    six-byte words are 5.9 bytes a token, which the gateway learns from each answer's
    usage.prompt_tokens, from a prior of 4."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0)
    words = " ".join(f"w{i % 10}xyz" for i in range(300))  # 5 letters and a space each
    sent = counted = 0
    for _ in range(30):
        answer = client.chat.completions.create(
            model=sim.model, messages=[{"role": "user", "content": words}], max_tokens=2
        )
        sent += len(words.encode())
        counted += answer.usage.prompt_tokens
    truth = sent / counted
    status = httpx.get(gateway.url + "/saber/status").json()["prompt_size"]
    assert status["observed"] == 30 and not status["tokenize"]
    assert status["bytes_per_token"] == pytest.approx(truth, rel=0.08)
    assert gateway.gateway.scheduler.lengths.prompts.tokens(len(words.encode())) == pytest.approx(
        300 + 4, rel=0.08
    )
