"""What a prompt tells the scheduler at the edge: its size and its system prompt's digest."""

from __future__ import annotations

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
