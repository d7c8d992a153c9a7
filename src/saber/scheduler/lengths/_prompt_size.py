"""A prompt's size in tokens at arrival, without a tokenizer: its bytes over a
bytes-per-token ratio learned from what the engine reports.

The gateway sees a request's bytes at once but its tokens only when the engine
answers (``usage.prompt_tokens``). Tokenizers of code models make 3-4.5 bytes a token
on source code and English; the ratio is learned per model (one per scheduler, or per
pool: the replicas of one model share it) as the ratio of decaying sums of bytes and
tokens over finished requests, starting from PRIOR_BYTES_PER_TOKEN. Sums, not a mean
of ratios: a long prompt tells the ratio better than a short one, whose chat template
adds tokens that its bytes do not show.
"""

from __future__ import annotations

from typing import Any

PRIOR_BYTES_PER_TOKEN = 4.0
PRIOR_TOKENS = 1000.0
"""The prior is worth this many tokens: a few prompts outweigh it."""
HALF_LIFE = 200.0
"""Finished requests after which one counts half: a new model shows within a few
hundred requests."""


class PromptSize:
    """Bytes per prompt token, learned from each answer's ``usage.prompt_tokens``."""

    def __init__(self) -> None:
        self._decay = 0.5 ** (1.0 / HALF_LIFE)
        self._bytes = PRIOR_BYTES_PER_TOKEN * PRIOR_TOKENS
        self._tokens = PRIOR_TOKENS
        self.observed = 0

    @property
    def bytes_per_token(self) -> float:
        return self._bytes / self._tokens

    def tokens(self, nbytes: int) -> float:
        """The tokens a prompt of ``nbytes`` bytes is expected to make (at least one)."""
        return max(nbytes / self.bytes_per_token, 1.0)

    def observe(self, nbytes: int, tokens: int) -> None:
        """A prompt of ``nbytes`` bytes was ``tokens`` tokens (the engine's count)."""
        if nbytes <= 0 or tokens <= 0:
            return
        self._bytes = self._bytes * self._decay + nbytes
        self._tokens = self._tokens * self._decay + tokens
        self.observed += 1

    def summary(self) -> dict[str, Any]:
        return {"bytes_per_token": round(self.bytes_per_token, 3), "observed": self.observed}

    def state(self) -> dict[str, float]:
        return {"bytes": self._bytes, "tokens": self._tokens, "observed": self.observed}

    def restore(self, state: dict[str, Any]) -> None:
        nbytes, tokens = float(state["bytes"]), float(state["tokens"])
        if not (nbytes > 0 and tokens > 0):
            raise ValueError("a prompt-size state without bytes or tokens")
        self._bytes, self._tokens = nbytes, tokens
        self.observed = int(state.get("observed", 0))
