"""How many sequences a request runs: choices per prompt times prompts."""

from __future__ import annotations

from typing import Any

import pytest

from saber import wire


@pytest.mark.parametrize(
    ("prompt", "count"),
    [
        ("def f():", 1),
        ("", 1),
        ([1, 2, 3], 1),  # one prompt of token ids
        (["a", "b", "c"], 3),
        ([[1, 2], [3]], 2),
        ([], 0),
        ([True, False], 2),  # booleans are not token ids
    ],
)
def test_prompt_count(prompt: Any, count: int) -> None:
    assert wire.prompt_count(prompt) == count


@pytest.mark.parametrize(
    ("body", "chat", "total", "shown"),
    [
        ({"prompt": "x"}, False, 1, "n=1 x 1 prompt"),
        ({"prompt": ["x"] * 300}, False, 300, "n=1 x 300 prompts"),
        ({"prompt": [1, 2, 3], "n": 3}, False, 3, "n=3 x 1 prompt"),
        ({"prompt": [[1], [2]], "n": 2, "best_of": 5}, False, 10, "best_of=5 x 2 prompts"),
        ({"prompt": "x", "n": 4, "best_of": 2}, False, 4, "n=4 x 1 prompt"),
        ({"prompt": "x", "n": None, "best_of": None}, False, 1, "n=1 x 1 prompt"),
        ({"messages": [], "n": 5, "prompt": ["ignored"] * 9}, True, 5, "n=5 x 1 prompt"),
    ],
)
def test_sequences(body: dict[str, Any], chat: bool, total: int, shown: str) -> None:
    seqs = wire.sequences(body, chat=chat)
    assert seqs.total == total and str(seqs) == shown
