"""The harness's bounded wait: returns what it waited for, or fails with what it saw."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import pytest

from harness import wait_for


def test_it_returns_the_first_value_that_satisfies_the_condition() -> None:
    counter = itertools.count()
    assert wait_for(lambda: next(counter), lambda n: n >= 3, timeout=5, step=0) == 3


def test_past_the_bound_it_fails_with_what_it_waited_for_and_the_last_value_seen() -> None:
    counter = itertools.count()
    started = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        wait_for(
            lambda: next(counter),
            lambda n: n < 0,
            timeout=0.2,
            describe=lambda: "a negative count",
            step=0.01,
        )
    assert 0.2 <= time.monotonic() - started < 5
    message = str(failed.value)
    assert "a negative count" in message
    last = int(message.rsplit("last observed: ", 1)[1])
    assert last >= 1  # the last poll's value, not the first
    assert f"({last + 1} polls)" in message


def test_an_expected_exception_is_not_yet_and_any_other_propagates() -> None:
    attempts = iter([ConnectionError("refused"), ConnectionError("refused"), 7])

    def observe() -> int:
        step = next(attempts)
        if isinstance(step, Exception):
            raise step
        return step

    assert wait_for(observe, timeout=5, step=0, retry_on=(ConnectionError,)) == 7
    with pytest.raises(AssertionError, match="ConnectionError\\('down'\\)"):
        wait_for(_raise(ConnectionError("down")), timeout=0.05, retry_on=(ConnectionError,))
    with pytest.raises(KeyError):
        wait_for(_raise(KeyError("x")), timeout=5, retry_on=(ConnectionError,))


def _raise(exc: Exception) -> Callable[[], None]:
    def observe() -> None:
        raise exc

    return observe
