"""How many tokens a prompt has, and how many a request generates.

Prompt tokens, the rule of ``saber.workload``: one token per whitespace-separated
word. A completion prompt that is a string counts its words (an empty string
counts 1, the BOS token); a list of token ids counts the ids; a list of strings or
of id lists is several prompts (``saber.wire.prompt_count``), each with ``n``
choices. A chat request counts ``count_chat_tokens(messages)``: the words of every
text content plus ``CHAT_TOKENS_PER_MESSAGE`` per message for the template.

Output tokens: with ``ignore_eos``, exactly ``max_tokens``. Without it, a natural
length is drawn, deterministically from ``--seed``, the prompt text and the choice's
place among the prompt's ``n`` (the first choice's as with ``n`` = 1), then
raised to ``min_tokens`` and capped by ``max_tokens`` (a capped answer finishes
with ``length``, one that ends by itself with ``stop``). The natural length comes
from ``--output-len``: ``task`` (the default) draws from the output-length
distribution of the task type the prompt looks like (``saber.workload.guess_task``,
lognormal around Table I's means), or from ``--fallback-output-len`` when the
prompt looks like none; ``fixed:N`` and ``lognormal:MEAN:CV`` apply to every
prompt.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from saber import wire
from saber.config import TaskType, load_tasks
from saber.workload import (
    count_chat_tokens,
    count_tokens,
    guess_task,
    lognormal_params,
    sample_output_tokens,
)

Kind = Literal["task", "fixed", "lognormal"]


@dataclass(frozen=True)
class LengthSpec:
    """A parsed ``--output-len``: ``task``, ``fixed:N`` or ``lognormal:MEAN:CV``."""

    kind: Kind
    mean: float = 0.0
    cv: float = 0.0

    @classmethod
    def parse(cls, text: str) -> LengthSpec:
        parts = text.strip().split(":")
        try:
            if parts == ["task"]:
                return cls("task")
            if parts[0] == "fixed" and len(parts) == 2:
                n = int(parts[1])
                if n >= 1:
                    return cls("fixed", float(n))
            if parts[0] == "lognormal" and len(parts) == 3:
                mean, cv = float(parts[1]), float(parts[2])
                if mean >= 1 and cv >= 0:
                    return cls("lognormal", mean, cv)
        except ValueError:
            pass
        raise ValueError(
            f"bad output length {text!r}: expected task, fixed:N (N >= 1) "
            "or lognormal:MEAN:CV (MEAN >= 1, CV >= 0)"
        )

    def sample(self, rng: np.random.Generator) -> int:
        if self.kind == "fixed":
            return int(self.mean)
        if self.kind == "lognormal":
            if self.cv == 0:
                return max(1, round(self.mean))
            mu, sigma = lognormal_params(self.mean, self.cv)
            return max(1, round(float(rng.lognormal(mu, sigma))))
        raise ValueError("a task spec samples through OutputLengths")


@dataclass(frozen=True)
class Prompt:
    """One prompt as the engine sees it: a token count, and text to seed from."""

    tokens: int
    text: str


PromptField = str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]]


def completion_prompts(prompt: PromptField) -> list[Prompt]:
    """The prompts of a ``/v1/completions`` body (already type-checked)."""
    if isinstance(prompt, str):
        return [_text_prompt(prompt)]
    items: list[Any] = list(prompt)
    if wire.is_token_ids(items):
        return [_ids_prompt(items)]
    return [_text_prompt(x) if isinstance(x, str) else _ids_prompt(x) for x in items]


def _text_prompt(text: str) -> Prompt:
    return Prompt(max(1, count_tokens(text)), text)


def _ids_prompt(ids: Sequence[int]) -> Prompt:
    return Prompt(len(ids), " ".join(map(str, ids)))


def chat_prompt(messages: Sequence[Mapping[str, object]]) -> Prompt:
    """A chat request's prompt; its text is the last user message's, so the task
    type is guessed from what the user asked rather than the system prompt."""
    texts = [_content_text(m.get("content")) for m in messages]
    users = [t for m, t in zip(messages, texts, strict=True) if m.get("role") == "user"]
    text = users[-1] if users else "\n".join(texts)
    return Prompt(count_chat_tokens(messages), text)


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    return ""


@functools.cache
def _default_tasks() -> dict[str, TaskType]:
    return load_tasks()


class OutputLengths:
    """The output-length rule of one server (see the module docstring)."""

    def __init__(
        self,
        spec: str = "task",
        fallback: str = "lognormal:128:0.6",
        *,
        seed: int = 0,
        tasks: Mapping[str, TaskType] | None = None,
    ) -> None:
        self.spec = LengthSpec.parse(spec)
        self.fallback = LengthSpec.parse(fallback)
        self.seed = seed
        self._tasks = tasks

    @property
    def tasks(self) -> Mapping[str, TaskType]:
        return self._tasks if self._tasks is not None else _default_tasks()

    def natural(self, text: str, choice: int = 0) -> int:
        """The length the answer to ``text`` would have if nothing capped it; ``choice``:
        which of the prompt's ``n`` answers (each draws its own)."""
        rng = np.random.default_rng(self._seed_for(text, choice))
        if self.spec.kind != "task":
            return self.spec.sample(rng)
        task = self.tasks.get(guess_task(text) or "")
        if task is None:
            return self.fallback.sample(rng)
        return int(sample_output_tokens(rng, task, 1)[0])

    def output_tokens(
        self,
        text: str,
        *,
        max_tokens: int,
        ignore_eos: bool,
        min_tokens: int = 0,
        choice: int = 0,
    ) -> tuple[int, bool]:
        """(tokens to generate, whether the answer ended by itself before the cap)."""
        if ignore_eos:
            return max_tokens, False
        n = max(self.natural(text, choice), min_tokens, 1)
        return (n, True) if n <= max_tokens else (max_tokens, False)

    def _seed_for(self, text: str, choice: int = 0) -> int:
        key = f"{self.seed}\x00{text}" + (f"\x00{choice}" if choice else "")
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little")
