"""The text of an answer: filler words, one per token, cut at a stop string.

The whole answer is known when the request arrives (its length is drawn up
front), so stop strings are resolved then too: the answer ends with the token
that completes the first match, as in vLLM, and the stop string is left out of
the text unless ``include_stop_str_in_output``. Matches that complete before
``min_tokens`` tokens are ignored, as vLLM does.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from saber.workload import filler


@dataclass(frozen=True)
class Answer:
    """What one choice generates: ``tokens`` tokens whose streamed text pieces join
    to ``text``; ``finish_reason`` is ``stop`` or ``length``; ``stop_reason`` is the
    matched stop string, if one ended it."""

    tokens: int
    finish_reason: str
    stop_reason: str | None
    text: str
    _ends: tuple[int, ...]  # character end of token i's piece in the full filler

    def piece(self, start: int, end: int) -> str:
        """The text of tokens ``[start, end)``, clipped to the visible answer."""
        if end <= start:
            return ""
        lo = self._ends[start - 1] if start > 0 else 0
        hi = self._ends[end - 1]
        return self.text[lo:hi]


def make_answer(
    tokens: int,
    *,
    ended: bool,
    stop: Sequence[str] = (),
    min_tokens: int = 0,
    include_stop: bool = False,
) -> Answer:
    """The answer of ``tokens`` filler tokens; ``ended`` if it stopped by itself
    (EOS) rather than at ``max_tokens``."""
    full = filler(tokens)
    ends: list[int] = []
    pos = 0
    for i, word in enumerate(full.split(" ")):
        pos += len(word) + (1 if i else 0)
        ends.append(pos)
    best: tuple[int, int, str] | None = None  # (token count, match start, stop string)
    for s in stop:
        if not s:
            continue
        at = full.find(s)
        while at != -1:
            count = bisect.bisect_left(ends, at + len(s)) + 1  # tokens to complete it
            if count >= min_tokens:
                if best is None or (count, at) < best[:2]:
                    best = (count, at, s)
                break
            at = full.find(s, at + 1)
    if best is None:
        return Answer(tokens, "stop" if ended else "length", None, full, tuple(ends))
    count, at, s = best
    visible = at + len(s) if include_stop else at
    return Answer(count, "stop", s, full[:visible], tuple(ends[:count]))
