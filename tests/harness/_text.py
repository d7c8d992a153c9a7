"""Seeded pseudo-text: the corpus the tiny models' vocabularies are made from.

No model hub is reachable, so the tokenizers are trained (vLLM) or assembled
(llama.cpp) from text generated here. Words are built from syllables and drawn
with Zipf-like frequencies so that a BPE trainer finds plenty of merges; a few
code-like lines make the vocabulary look a little like a code model's.
"""

from __future__ import annotations

import random

_ONSETS = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w"]
_ONSETS += ["br", "ch", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "sl", "st", "th", "tr"]
_NUCLEI = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "io", "oo", "ou"]
_CODAS = ["", "", "", "l", "m", "n", "r", "s", "t", "x", "nd", "ng", "nt", "rt", "st"]
_CODE = ["def", "return", "if", "else", "for", "in", "import", "class", "self", "None"]


def words(seed: int, count: int = 600) -> list[str]:
    """``count`` distinct pseudo-words, most frequent first."""
    rng = random.Random(seed)
    out: dict[str, None] = dict.fromkeys(_CODE)
    while len(out) < count:
        n = rng.choice((1, 1, 2, 2, 2, 3))
        syllables = (
            rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS) for _ in range(n)
        )
        word = "".join(syllables)
        out.setdefault(word, None)
    result = list(out)
    rng.shuffle(result)
    return result


def corpus(seed: int, chars: int = 60_000) -> str:
    """About ``chars`` characters of sentences and code-like lines."""
    rng = random.Random(seed + 1)
    vocab = words(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    lines: list[str] = []
    size = 0
    while size < chars:
        if rng.random() < 0.2:
            name, arg = rng.choices(vocab, weights, k=2)
            line = f"def {name}({arg}):\n    return {arg} + {rng.randint(0, 99)}"
        else:
            picked = rng.choices(vocab, weights, k=rng.randint(4, 14))
            line = " ".join(picked).capitalize() + rng.choice(".!?,.")
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"
