from __future__ import annotations

from saber.config import TaskType


def expected_tokens(task: TaskType, max_tokens: int | None) -> int:
    """How many tokens the scheduler should assume a request will generate.

    Clients send ``max_tokens`` as a cap, not a prediction, so the cap is
    trusted only up to the task type's expectation. One function, so that a
    smarter estimator (learned per task) replaces it in one place.
    """
    if max_tokens is None or max_tokens <= 0:
        return task.expected_tokens
    return min(max_tokens, task.expected_tokens)
