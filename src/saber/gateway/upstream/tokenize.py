"""A prompt's exact token count from the backend's own tokenizer, where that is cheap
and the operator asks for it (``backend.tokenize``).

By default the gateway estimates a prompt's tokens from its bytes (a ratio learned per
model from ``usage.prompt_tokens``), which costs nothing. With ``backend.tokenize`` it
asks the engine first: vLLM's ``POST /tokenize`` (a completion's prompt, or a chat's
messages through its template) and llama.cpp's (a completion's prompt: it has no chat
form; a chat is estimated from its bytes), within ``TOKENIZE_TIMEOUT_S``; an engine
that cannot (no such route, a slow answer) is estimated from bytes, and one that
answers 404 or 405 is not asked again."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx

from saber.backend import BackendKind
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.gateway.upstream.client import Upstream
from saber.gateway.upstream.dialect import Dialect

log = logging.getLogger(GATEWAY_LOGGER)

TOKENIZE_TIMEOUT_S = 0.25
"""The most a request waits for its count: a local tokenizer takes a millisecond or two."""


class Tokenizer:
    """Asks the backend for prompts' token counts, until it says it cannot."""

    def __init__(self, upstream: Callable[[], Upstream]) -> None:
        self.upstream = upstream  # the client of a backend that serves, now
        self.enabled = True

    async def count(
        self, chat: bool, body: dict[str, Any], model: str | None, dialect: Dialect
    ) -> int | None:
        """The prompt's tokens as the backend counts them; None: estimate from bytes."""
        if not self.enabled:
            return None
        request = _request(chat, body, model, dialect)
        if request is None:
            return None
        upstream = self.upstream()
        try:
            resp = await upstream.client.post(
                upstream.base + "/tokenize",
                content=json.dumps(request).encode(),
                headers={"content-type": "application/json"},
                timeout=TOKENIZE_TIMEOUT_S,
            )
        except httpx.HTTPError:
            return None
        if resp.status_code in (404, 405):
            self.enabled = False
            log.warning("the backend has no /tokenize: prompt sizes are estimated from bytes")
            return None
        if resp.status_code != 200:
            return None
        return _count(resp)


def _request(
    chat: bool, body: dict[str, Any], model: str | None, dialect: Dialect
) -> dict[str, Any] | None:
    if dialect.kind is BackendKind.LLAMACPP:
        prompt = body.get("prompt")
        return {"content": prompt, "add_special": True} if isinstance(prompt, str) else None
    if chat:
        return {"model": model, "messages": body.get("messages"), "add_generation_prompt": True}
    prompt = body.get("prompt")
    return {"model": model, "prompt": prompt} if isinstance(prompt, str) else None


def _count(resp: httpx.Response) -> int | None:
    try:
        data = resp.json()
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    count = data.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return count
    tokens = data.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None
