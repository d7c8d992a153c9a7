"""Admission: the scheduler driven by events and one timer, releases exactly once."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saber.config import TaskType
from saber.gateway.admission import Admission, Ticket
from saber.scheduler import Action, Outcome, Policy, Scheduler, Tier


def task(name: str = "t", sla: float = 1.0, tokens: int = 50) -> TaskType:
    return TaskType(
        name=name, mean_input_tokens=10, mean_output_tokens=tokens, sla_s=sla, max_tokens=tokens
    )


def flat(speed: float) -> Callable[[float], float]:
    return lambda load: speed


class FakeLoop:
    """A clock we move by hand, with call_at timers; futures come from the real loop."""

    def __init__(self, real: asyncio.AbstractEventLoop) -> None:
        self.real = real
        self.t = 100.0
        self._timers: list[tuple[float, int, FakeTimer]] = []
        self._seq = itertools.count()
        self.armed = 0

    def time(self) -> float:
        return self.t

    def create_future(self) -> asyncio.Future[Any]:
        return self.real.create_future()

    def call_at(self, when: float, cb: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(when, cb)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        self.armed += 1
        return timer

    def pending(self) -> list[FakeTimer]:
        return [t for _, _, t in self._timers if not t.cancelled]

    def advance(self, dt: float) -> None:
        end = self.t + dt
        while self._timers and self._timers[0][0] <= end:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self.t = max(self.t, when)
            timer.cb()
        self.t = end


class FakeTimer:
    def __init__(self, when: float, cb: Callable[[], None]) -> None:
        self._when = when
        self.cb = cb
        self.cancelled = False

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        self.cancelled = True


def make(speed: float = 100.0, **policy: Any) -> tuple[Admission, FakeLoop, Scheduler]:
    loop = FakeLoop(asyncio.get_running_loop())
    sched = Scheduler(flat(speed), Policy(**policy), seed=1)
    adm = Admission(sched, loop=loop, trace=True)  # type: ignore[arg-type]
    return adm, loop, sched


async def test_admit_at_once_and_release_once() -> None:
    adm, _, sched = make()
    t = adm.submit(task(), 20, streaming=False)
    assert t.future.done() and t.future.result().action is Action.ADMIT
    assert sched.load == 1 and t.running
    assert adm.release(t, "finish") is Outcome.SERVED
    for how in ("finish", "fail", "cancel"):
        assert adm.release(t, how) is None  # type: ignore[arg-type]
    assert sched.load == 0 and adm.active == 0
    assert [e.call for e in adm.trace or []].count("finish") == 1


async def test_min_tokens_raise_the_expected_tokens() -> None:
    adm, _, _ = make()
    assert adm.submit(task(tokens=50), 400, streaming=False).req.tokens == 50
    assert adm.submit(task(tokens=50), 400, streaming=False, min_tokens=300).req.tokens == 300
    assert adm.submit(task(tokens=50), 400, streaming=False, min_tokens=20).req.tokens == 50


async def test_release_admits_the_next() -> None:
    adm, _, sched = make(max_concurrency=1)
    a = adm.submit(task(), 10, streaming=True)
    b = adm.submit(task(), 10, streaming=True)
    assert a.future.done() and not b.future.done()
    assert sched.queued() == 1
    adm.release(a, "fail")
    assert b.future.done() and b.future.result().action is Action.ADMIT
    adm.release(b, "finish")
    assert sched.load == 0


async def test_cancel_while_queued_leaves_the_queue() -> None:
    adm, _, sched = make(max_concurrency=1)
    a = adm.submit(task(), 10, streaming=False)
    b = adm.submit(task(), 10, streaming=False)
    assert adm.release(b, "finish") is Outcome.CANCELLED_QUEUED  # never admitted: cancelled
    assert sched.queued() == 0 and b.future.cancelled()
    assert adm.release(a, "cancel") is Outcome.CANCELLED_RUNNING
    assert sched.load == 0


async def test_queue_full_rejects_at_once() -> None:
    adm, _, _ = make(max_concurrency=1, queue_cap=1)
    adm.submit(task(), 10, streaming=False)
    adm.submit(task(), 10, streaming=False)
    c = adm.submit(task(), 10, streaming=False)
    d = c.future.result()
    assert d.action is Action.REJECT and d.outcome is Outcome.REJECTED_QUEUE_FULL
    assert c.released and adm.release(c, "cancel") is None


async def test_one_timer_demotes_then_expires_without_polling() -> None:
    # f(1) = 100 tok/s, 50 tokens, SLA 1 s: hopeless from arrival + 0.5 s.
    adm, loop, sched = make(speed=100.0, max_concurrency=1, lpq_timeout_s=0.2)
    a = adm.submit(task(), 50, streaming=False)
    b = adm.submit(task(), 50, streaming=False)
    arrival = b.arrival
    assert [t.when() for t in loop.pending()] == [pytest.approx(arrival + 0.5)]
    loop.advance(0.49)
    assert b.tier is Tier.HIGH
    loop.advance(0.02)
    assert b.tier is Tier.LOW and not b.future.done()
    assert [t.when() for t in loop.pending()] == [pytest.approx(arrival + 0.7)]
    loop.advance(0.2)
    d = b.future.result()
    assert d.action is Action.REJECT and d.outcome is Outcome.REJECTED_LPQ_TIMEOUT
    assert d.at == pytest.approx(arrival + 0.7)
    assert loop.pending() == []
    timer_polls = [e for e in adm.trace or [] if e.call == "timer"]
    assert len(timer_polls) == 2  # one wake-up per demotion or expiry, nothing else
    adm.release(a, "finish")
    assert sched.load == 0 and sched.queued() == 0


async def test_retry_after_formula() -> None:
    adm, loop, _ = make(speed=50.0)
    assert adm.retry_after_s() == 1  # nothing runs
    s = adm.submit(task(tokens=400), 400, streaming=True)  # 400 tokens at f(L)
    n = adm.submit(task(tokens=300), 300, streaming=False)
    s.tokens_out = 100  # 300 left -> 6 s at 50 tok/s
    loop.advance(1.0)  # the non-stream has done ~50 -> 250 left -> 5 s
    assert adm.retry_after_s() == 5
    s.tokens_out = 390  # 10 left -> 0.2 s -> rounded up to 1
    assert adm.retry_after_s() == 1
    adm.release(s, "finish")
    adm.release(n, "finish")


async def test_real_loop_timer_fires() -> None:
    sched = Scheduler(flat(1000.0), Policy(max_concurrency=1, lpq_timeout_s=0.05), seed=0)
    adm = Admission(sched)
    a = adm.submit(task(sla=0.1, tokens=50), 50, streaming=False)
    b = adm.submit(task(sla=0.1, tokens=50), 50, streaming=False)
    d = await asyncio.wait_for(b.future, 1.0)  # demoted at 0.05 s, expired at 0.10 s
    assert d.outcome is Outcome.REJECTED_LPQ_TIMEOUT
    adm.release(a, "finish")
    adm.close()


Op = tuple[str, int, float]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["submit", "finish", "fail", "cancel", "advance"]),
            st.integers(0, 30),
            st.floats(0.0, 0.4),
        ),
        max_size=120,
    ),
    st.integers(1, 4),
)
def test_no_leak_under_any_interleaving(ops: list[Op], cap: int) -> None:
    asyncio.run(_interleave(ops, cap))


async def _interleave(ops: list[Op], cap: int) -> None:
    adm, loop, sched = make(speed=200.0, max_concurrency=cap, queue_cap=6, lpq_timeout_s=0.3)
    tickets: list[Ticket] = []
    rng = random.Random(len(ops))
    for op, i, x in ops:
        if op == "submit":
            sla = rng.choice([0.2, 0.5, 2.0])
            tickets.append(adm.submit(task(sla=sla), rng.randint(1, 100), streaming=x > 0.2))
        elif op == "advance":
            loop.advance(x)
        elif tickets:
            t = tickets[i % len(tickets)]
            first = not t.released
            out = adm.release(t, op)  # type: ignore[arg-type]
            assert (out is not None) == first
        live = [t for t in tickets if not t.released]
        assert sched.load == sum(t.admitted_at is not None for t in live)
        assert sched.queued() == sum(t.admitted_at is None for t in live)
        assert sched.load <= cap
    for t in tickets:
        adm.release(t, "cancel")
    assert sched.load == 0 and sched.queued() == 0 and adm.active == 0
    assert loop.pending() == []
