"""How many sequences one generation request runs: its choices times its prompts.

An engine runs every choice of every prompt as a sequence of its own, in a batch
slot of its own. ``/v1/completions`` takes several prompts at once: a list of
strings, or a list of token lists, is one prompt per item; a single list of token
ids is ONE prompt. A chat has one. ``n`` asks for that many choices per prompt;
``best_of`` above ``n`` makes an engine that honours it run ``best_of`` and return
the best ``n`` (vLLM before its V1 engine; vLLM 0.32 ignores the field).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def is_token_ids(prompt: Any) -> bool:
    """A prompt that is one list of token ids (not a list of prompts)."""
    return (
        isinstance(prompt, list)
        and bool(prompt)
        and all(isinstance(x, int) and not isinstance(x, bool) for x in prompt)
    )


def prompt_count(prompt: Any) -> int:
    """Prompts in a ``/v1/completions`` ``prompt``: a string or one list of token ids
    is one; any other list holds one per item (0 for an empty list)."""
    if not isinstance(prompt, list) or is_token_ids(prompt):
        return 1
    return len(prompt)


@dataclass(frozen=True, slots=True)
class Sequences:
    """What a request runs: ``choices`` per prompt (``n``, or ``best_of`` when larger;
    ``field`` names which) for each of its ``prompts``."""

    choices: int
    field: str
    prompts: int

    @property
    def total(self) -> int:
        return self.choices * self.prompts

    def __str__(self) -> str:
        noun = "prompt" if self.prompts == 1 else "prompts"
        return f"{self.field}={self.choices} x {self.prompts} {noun}"


def sequences(body: Mapping[str, Any], *, chat: bool) -> Sequences:
    """The sequences of a request body whose ``n`` and ``best_of`` are integers or
    absent (a null is absent); ``chat``: the body is a chat's (one prompt)."""
    n = body.get("n")
    best_of = body.get("best_of")
    choices, field = (n, "n") if isinstance(n, int) and n >= 1 else (1, "n")
    if isinstance(best_of, int) and best_of > choices:
        choices, field = best_of, "best_of"
    prompts = 1 if chat else prompt_count(body.get("prompt"))
    return Sequences(choices, field, prompts)
