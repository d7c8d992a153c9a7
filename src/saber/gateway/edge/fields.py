"""The numbers a request carries to the scheduler or the backend, bounded at the edge.

A JSON number can be anything: ``1e400`` parses to ``inf``, an integer may have
thousands of digits, ``true`` is an ``int`` in Python. Each field below that the
gateway or an engine reads as a number is checked for its type and its range
before the request goes anywhere, and a bad one is a 400 that names the field.
``MAX_TOKENS`` is the scheduler's own bound on a token count. Other fields pass
through as the client sent them: the backend's to judge.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from saber.gateway.edge.tasks import Endpoint
from saber.gateway.errors import invalid, quote
from saber.scheduler import MAX_TOKENS

MAX_CHOICES = 16
"""``n`` and ``best_of``: each choice is a sequence the scheduler counts (``cost``)."""
MAX_LOGPROBS = 20
"""vLLM's default ``max_logprobs``."""
INT64 = 2**63


@dataclass(frozen=True, slots=True)
class Bound:
    """What one field may hold: an integer or a finite number, within [low, high]."""

    integer: bool
    low: float
    high: float

    def check(self, name: str, value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise invalid(
                f"'{name}' must be {'an integer' if self.integer else 'a number'}, "
                f"got {kind_of(value)}",
                param=name,
            )
        if self.integer and not isinstance(value, int):
            raise invalid(f"'{name}' must be an integer, got {quote(value)}", param=name)
        finite = isinstance(value, int) or math.isfinite(value)  # isfinite(10**400) overflows
        if not finite or not self.low <= value <= self.high:
            raise invalid(
                f"'{name}' must be within {quote(self.low)}..{quote(self.high)}, "
                f"got {quote(value)}",
                param=name,
            )


def _int(low: float, high: float) -> Bound:
    return Bound(True, low, high)


def _num(low: float, high: float) -> Bound:
    return Bound(False, low, high)


TOKENS = _int(0, MAX_TOKENS)
BOUNDS: dict[str, Bound] = {
    # Token counts: what the scheduler reads (max_* and min_tokens) and the engines' own.
    "max_tokens": TOKENS,
    "max_completion_tokens": TOKENS,
    "min_tokens": TOKENS,
    "truncate_prompt_tokens": _int(-1, MAX_TOKENS),
    # How many sequences one request makes.
    "n": _int(1, MAX_CHOICES),
    "best_of": _int(1, MAX_CHOICES),
    # Log-probabilities (chat's "logprobs" is a boolean: see _chat_logprobs).
    "top_logprobs": _int(0, MAX_LOGPROBS),
    "prompt_logprobs": _int(0, MAX_LOGPROBS),
    # Sampling.
    "temperature": _num(0, 2),
    "top_p": _num(0, 1),
    "min_p": _num(0, 1),
    "top_k": _int(-1, MAX_TOKENS),
    "presence_penalty": _num(-2, 2),
    "frequency_penalty": _num(-2, 2),
    "repetition_penalty": _num(0, 10),
    "length_penalty": _num(-1e6, 1e6),
    "seed": _int(-INT64, INT64 - 1),
    "priority": _int(-(2**31), 2**31 - 1),
}
"""Fields checked on both endpoints; a null is an absent field."""

LOGIT_BIAS_ENTRIES = 1024
MAX_TOKEN_ID = 2**31 - 1


UNCAPPED = _int(-1, MAX_TOKENS)
"""llama.cpp's caps, where -1 means none."""
CAPS = ("max_tokens", "max_completion_tokens", "n_predict")


def check(endpoint: Endpoint, body: dict[str, Any], *, llamacpp_caps: bool = False) -> None:
    """Every bounded field of ``body``; a GatewayError (400) names the first bad one.
    ``llamacpp_caps``: the engine reads ``n_predict`` and takes -1 for no cap."""
    for name, bound in BOUNDS.items():
        value = body.get(name)
        if value is not None:
            if llamacpp_caps and name in CAPS:
                bound = UNCAPPED
            bound.check(name, value)
    if llamacpp_caps and (value := body.get("n_predict")) is not None:
        UNCAPPED.check("n_predict", value)
    for name, extra in _EXTRA.items():
        value = body.get(name)
        if value is not None:
            extra(endpoint, value)


def _logprobs(endpoint: Endpoint, value: object) -> None:
    """Chat: whether to return them (a boolean). Completions: how many (0..20)."""
    if endpoint == "chat":
        if not isinstance(value, bool):
            raise invalid(f"'logprobs' must be a boolean, got {kind_of(value)}", param="logprobs")
        return
    _int(0, MAX_LOGPROBS).check("logprobs", value)


def _logit_bias(endpoint: Endpoint, value: object) -> None:
    if not isinstance(value, dict):
        raise invalid(f"'logit_bias' must be an object, got {kind_of(value)}", param="logit_bias")
    if len(value) > LOGIT_BIAS_ENTRIES:
        raise invalid(
            f"'logit_bias' may hold at most {LOGIT_BIAS_ENTRIES} entries, got {len(value)}",
            param="logit_bias",
        )
    bias = _num(-100, 100)
    for token, weight in value.items():
        if not token.isdigit() or int(token) > MAX_TOKEN_ID:
            raise invalid(
                f"'logit_bias' keys must be token ids, got {quote(token)}", param="logit_bias"
            )
        bias.check("logit_bias", weight)


def _prompt(endpoint: Endpoint, value: object) -> None:
    """Token ids in a prompt (a list of ids, or a list of such lists) are ids."""
    if endpoint != "completions" or not isinstance(value, list):
        return
    for item in value:
        ids = item if isinstance(item, list) else [item]
        for token in ids:
            if isinstance(token, int) and (
                isinstance(token, bool) or not 0 <= token <= MAX_TOKEN_ID
            ):
                raise invalid(
                    f"'prompt' token ids must be within 0..{MAX_TOKEN_ID}", param="prompt"
                )


_EXTRA: dict[str, Callable[[Endpoint, Any], None]] = {
    "logprobs": _logprobs,
    "logit_bias": _logit_bias,
    "prompt": _prompt,
}


def kind_of(value: object) -> str:
    """How an error message names a JSON value's type."""
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )
