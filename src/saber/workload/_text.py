"""Prompt text with a known token count, and the counting rule that goes with it.

Nothing here loads a tokenizer: the simulator and the benchmarks only need a
rule that is documented and consistent. The rule: one token per
whitespace-separated word, and ``CHAT_TOKENS_PER_MESSAGE`` extra tokens per chat
message for the template. Generated prompts start with a marker phrase of their
task type, so a stand-in backend can tell which task a prompt looks like.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

CHAT_TOKENS_PER_MESSAGE = 4

TASK_MARKERS: dict[str, str] = {
    "code_qna": "Question about this code:",
    "code_generation": "Write the code for:",
    "code_summary": "Summarize this code:",
    "code_translation": "Translate this code to Rust:",
    "code_completion": "Complete the code:",
}

_WORDS = (
    "def return self value list dict for while if else import from class async await "
    "yield lambda None True False int str float bytes index count total result items "
    "key data node tree graph path file line token batch queue request speed load "
    "deadline slot cache step model engine"
).split()


def count_tokens(text: str) -> int:
    return len(text.split())


def count_chat_tokens(messages: Iterable[Mapping[str, object]]) -> int:
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += count_tokens(content)
        elif isinstance(content, list):  # OpenAI content parts
            for part in content:
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    total += count_tokens(part["text"])
        total += CHAT_TOKENS_PER_MESSAGE
    return total


def filler(n_tokens: int, offset: int = 0) -> str:
    """``n_tokens`` words of code-flavoured filler, deterministic in ``offset``."""
    return " ".join(_WORDS[(offset + i) % len(_WORDS)] for i in range(max(0, n_tokens)))


def make_prompt(task: str, n_tokens: int, offset: int = 0) -> str:
    """A prompt of exactly ``n_tokens`` tokens (at least the marker's) for ``task``."""
    marker = TASK_MARKERS.get(task, "")
    rest = max(0, n_tokens - count_tokens(marker))
    return f"{marker} {filler(rest, offset)}".strip()


def guess_task(text: str) -> str | None:
    """The task type whose marker the text starts with, if any."""
    stripped = text.lstrip()
    for task, marker in TASK_MARKERS.items():
        if stripped.startswith(marker):
            return task
    return None
