"""What a request's prompt tells the scheduler before the engine sees it: its size and
what it shares with other requests.

Read once at the edge, from the checked body, without a tokenizer: the prompt's size
in bytes (the scheduler turns bytes into tokens with a ratio it learns per model from
``usage.prompt_tokens``), or its exact token count where the client sent token ids;
and a fingerprint of its system prompt, the part a template shares across requests
(``saber.scheduler.lengths._conditioned``). The scheduler never sees the text: a fingerprint
is a digest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from saber.gateway.edge.tasks import Endpoint

SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt's size (bytes of its text; tokens where the client sent token ids) and
    the fingerprint of what it shares with others (None: nothing recognised)."""

    nbytes: int = 0
    tokens: int | None = None
    fingerprint: str | None = None


NO_PROMPT = Prompt()


def read_prompt(endpoint: Endpoint, body: dict[str, Any]) -> Prompt:
    """The prompt of a checked completion request (``payload.parse`` has seen it)."""
    if endpoint == "chat":
        return _chat(body)
    return _completion(body.get("prompt"))


def _chat(body: dict[str, Any]) -> Prompt:
    messages = body.get("messages") or []
    size = sum(_text_bytes(m.get("content")) for m in messages if isinstance(m, dict))
    tools = body.get("tools")
    if tools:  # a chat template renders the tool definitions into the prompt
        size += len(json.dumps(tools, ensure_ascii=False, separators=(",", ":")).encode())
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    system = first.get("content") if first.get("role") in SYSTEM_ROLES else None
    fingerprint = _digest(system) if system else None
    return Prompt(size, None, fingerprint)


def _completion(prompt: object) -> Prompt:
    if isinstance(prompt, str):
        return Prompt(len(prompt.encode()))
    if not isinstance(prompt, list):
        return Prompt()
    if all(isinstance(t, int) for t in prompt):  # one prompt of token ids
        return Prompt(0, len(prompt))
    tokens, size = 0, 0
    for part in prompt:  # several prompts: strings, or lists of token ids
        if isinstance(part, str):
            size += len(part.encode())
        elif isinstance(part, list):
            tokens += len(part)
    return Prompt(size, tokens if tokens and not size else None)


def _text_bytes(content: object) -> int:
    """Bytes of a message's text: a string, or OpenAI's content parts."""
    if isinstance(content, str):
        return len(content.encode())
    if isinstance(content, list):
        return sum(
            len(part["text"].encode())
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return 0


def _digest(content: object) -> str:
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
