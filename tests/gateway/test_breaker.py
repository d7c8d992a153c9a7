"""A backend's circuit breaker: ejected after failures in a row, probed back in, the
probes backing off while it stays down."""

from __future__ import annotations

import pytest

from saber.gateway.upstream.breaker import MAX_BACKOFF, Breaker


def test_failures_in_a_row_open_it_and_a_success_between_resets_the_count() -> None:
    b = Breaker(eject_after=3, eject_s=10.0)
    assert not b.failed(0.0) and not b.failed(1.0)
    assert not b.succeeded()  # closed: nothing to close
    assert not b.failed(2.0) and not b.failed(3.0)  # the count started again
    assert b.failed(4.0) and b.open and b.ejections == 1
    assert b.probe_at == pytest.approx(14.0)
    assert not b.failed(5.0)  # already open: opened once
    assert b.ejections == 1


def test_probes_back_off_and_a_good_one_closes_it() -> None:
    b = Breaker(eject_after=1, eject_s=2.0)
    assert b.failed(0.0)
    now = 2.0
    rests: list[float] = []
    for _ in range(6):
        assert not b.probed(False, now)
        assert b.probe_at is not None
        rests.append(b.probe_at - now)
        now = b.probe_at
    assert rests == [4.0, 8.0, 16.0, 2.0 * MAX_BACKOFF, 2.0 * MAX_BACKOFF, 2.0 * MAX_BACKOFF]
    assert b.probed(True, now) and not b.open and b.probe_at is None
    # Open again later, it rests eject_s first, not the longest rest it had reached.
    assert b.failed(now + 1.0)
    assert b.probe_at == pytest.approx(now + 1.0 + 2.0)


def test_a_request_that_succeeds_while_open_closes_it() -> None:
    b = Breaker(eject_after=2, eject_s=5.0)
    b.failed(0.0)
    b.failed(0.1)
    assert b.open
    assert b.succeeded() and not b.open and b.failures == 0
    assert not b.probed(True, 1.0)  # closed: a late probe changes nothing


@pytest.mark.parametrize(("after", "rest"), [(0, 1.0), (1, 0.0), (1, -1.0)])
def test_bad_settings_are_refused(after: int, rest: float) -> None:
    with pytest.raises(ValueError, match="eject_after"):
        Breaker(after, rest)
