"""Admission: the scheduler driven by events and one timer; a request leaves it once,
the way its place in the scheduler says, and a failure there harms no other request."""

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
from saber.gateway.admission.driver import (
    RETRY_AFTER_MARGIN_S,
    RETRY_AFTER_MAX_S,
    RETRY_AFTER_MIN_MS,
    Admission,
    retry_after,
)
from saber.scheduler import (
    Action,
    Decision,
    Outcome,
    Policy,
    SchedRequest,
    Scheduler,
    Tier,
    request_for,
)


def task(
    name: str = "t", sla: float = 1.0, tokens: int = 50, useful: float | None = None
) -> TaskType:
    return TaskType(
        name=name,
        mean_input_tokens=10,
        mean_output_tokens=tokens,
        sla_s=sla,
        max_tokens=tokens,
        useful_s=useful,
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


def make(
    speed: float = 100.0, useful: float | None = None, **policy: Any
) -> tuple[Admission, FakeLoop, Scheduler]:
    """An admission on a hand-moved clock; task "t" is useful for ``useful`` seconds."""
    loop = FakeLoop(asyncio.get_running_loop())
    sched = Scheduler(flat(speed), Policy(**policy), tasks=[task(useful=useful)], seed=1)
    adm = Admission(sched, loop=loop, trace=True)  # type: ignore[arg-type]
    return adm, loop, sched


def offer(
    adm: Admission, t: TaskType, max_tokens: int | None, min_tokens: int = 0
) -> tuple[SchedRequest, asyncio.Future[Decision]]:
    req = request_for(
        t, id=adm.new_id(), arrival=adm.now(), max_tokens=max_tokens, min_tokens=min_tokens
    )
    return req, adm.offer(req)


async def test_admit_at_once_and_leave_once() -> None:
    adm, _, sched = make()
    r, f = offer(adm, task(), 20)
    assert f.done() and f.result().action is Action.ADMIT
    assert sched.load == 1 and sched.is_running(r.id) and r.admitted_at is not None
    assert adm.leave(r, served=True, tokens=20) is Outcome.SERVED
    for served in (True, False):
        assert adm.leave(r, served=served) is None
    assert sched.load == 0 and adm.active == 0
    assert [e.call for e in adm.trace or []].count("finish") == 1


async def test_min_tokens_raise_the_expected_tokens() -> None:
    adm, _, _ = make()
    assert offer(adm, task(tokens=50), 400)[0].tokens == 50
    assert offer(adm, task(tokens=50), 400, min_tokens=300)[0].tokens == 300
    assert offer(adm, task(tokens=50), 400, min_tokens=20)[0].tokens == 50


async def test_leaving_admits_the_next() -> None:
    adm, _, sched = make(max_concurrency=1)
    a, fa = offer(adm, task(), 10)
    b, fb = offer(adm, task(), 10)
    assert fa.done() and not fb.done()
    assert sched.queued() == 1
    assert adm.leave(a, served=False) is Outcome.CANCELLED_RUNNING
    assert fb.done() and fb.result().action is Action.ADMIT
    adm.leave(b, served=True)
    assert sched.load == 0


async def test_a_queued_request_is_cancelled_whatever_it_says() -> None:
    adm, _, sched = make(max_concurrency=1)
    a, _ = offer(adm, task(), 10)
    b, fb = offer(adm, task(), 10)
    assert adm.leave(b, served=True) is Outcome.CANCELLED_QUEUED  # never admitted: cancelled
    assert sched.queued() == 0 and fb.cancelled()
    assert adm.leave(a, served=False) is Outcome.CANCELLED_RUNNING
    assert sched.load == 0


async def test_queue_full_rejects_at_once() -> None:
    adm, _, _ = make(max_concurrency=1, queue_cap=1)
    offer(adm, task(), 10)
    offer(adm, task(), 10)
    c, fc = offer(adm, task(), 10)
    d = fc.result()
    assert d.action is Action.REJECT and d.outcome is Outcome.REJECTED_QUEUE_FULL
    assert c.outcome is Outcome.REJECTED_QUEUE_FULL and adm.active == 2
    assert adm.leave(c, served=False) is None  # the REJECT had let it go


async def test_one_timer_demotes_then_expires_without_polling() -> None:
    # f(1) = 100 tok/s, 50 tokens, SLA 1 s: hopeless from arrival + 0.5 s; useful for
    # 1.2 s, so worthless from arrival + 0.7 s.
    adm, loop, sched = make(speed=100.0, useful=1.2, max_concurrency=1)
    a, _ = offer(adm, task(), 50)
    b, fb = offer(adm, task(), 50)
    arrival = b.arrival
    assert [t.when() for t in loop.pending()] == [pytest.approx(arrival + 0.5)]
    loop.advance(0.49)
    assert b.tier is Tier.HIGH
    loop.advance(0.02)
    assert b.tier is Tier.LOW and not fb.done()
    assert [t.when() for t in loop.pending()] == [pytest.approx(arrival + 0.7)]
    loop.advance(0.2)
    d = fb.result()
    assert d.action is Action.REJECT and d.outcome is Outcome.REJECTED_EXPIRED
    assert d.at == pytest.approx(arrival + 0.7)
    assert loop.pending() == []
    timer_polls = [e for e in adm.trace or [] if e.call == "timer"]
    assert len(timer_polls) == 2  # one wake-up per demotion or expiry, nothing else
    adm.leave(a, served=True)
    assert sched.load == 0 and sched.queued() == 0


def test_retry_after_bounds() -> None:
    assert retry_after(None) == (1, RETRY_AFTER_MIN_MS)  # nothing runs: come back now
    assert RETRY_AFTER_MARGIN_S == 0.25  # time for the last token to arrive, and admission
    assert retry_after(0.0123) == (1, 263)
    assert retry_after(2.3456) == (3, 2596)
    # Below 60 s, or the AI SDK ignores it (and openai-python refuses above 120 s).
    assert retry_after(500.0) == (RETRY_AFTER_MAX_S, RETRY_AFTER_MAX_S * 1000)
    assert RETRY_AFTER_MAX_S < 60


async def test_retry_after_comes_from_live_progress_and_is_checked() -> None:
    seen: list[tuple[float, float]] = []
    adm, loop, _ = make(speed=50.0)
    adm.on_slot_free = lambda predicted, observed: seen.append((predicted, observed))
    assert adm.retry_after() == (1, RETRY_AFTER_MIN_MS)  # nothing runs
    s, _ = offer(adm, task(tokens=400), 400)  # a stream of 400 tokens
    n, _ = offer(adm, task(tokens=300), 300)  # reports nothing: paced by f(L)
    adm.progress(s, 1)
    loop.advance(1.0)
    adm.progress(s, 21)  # 20 tok/s of its own: 379 left, about 19 s
    # The non-stream has made about 50 by the token clock: 250 left, 5 s at 50 tok/s.
    assert adm.retry_after() == (6, pytest.approx(5250, rel=0.02))
    loop.advance(0.05)  # reused within RETRY_AFTER_REUSE_S, less the time gone by
    assert adm.retry_after()[1] == pytest.approx(5200, rel=0.02)
    loop.advance(4.0)
    adm.leave(n, served=True)  # a slot frees 4.05 s after the first Retry-After
    assert [(round(p, 2), round(o, 2)) for p, o in seen] == [(5.0, 4.05), (4.95, 4.0)]
    adm.leave(s, served=True)
    assert len(seen) == 2  # each probe is answered by the first slot to free, once


async def test_a_full_queue_says_when_its_own_turn_comes() -> None:
    """Turned away because its task's queue is full, a client finds room only once its
    task's waiting request is admitted, behind those due sooner: not at the first slot
    to free."""
    adm, loop, sched = make(speed=50.0, max_concurrency=3, queue_cap=1, order="deadline")
    # End in 2, 4 and 6 s at 50 tok/s, each certain.
    seen: list[tuple[float, float]] = []
    adm.on_slot_free = lambda predicted, observed: seen.append((predicted, observed))
    soonest, _ = offer(adm, task(tokens=100), 100)
    second, _ = offer(adm, task(tokens=200), 200)
    offer(adm, task(tokens=300), 300)
    offer(adm, task("soon", sla=20.0, tokens=10), 10)
    offer(adm, task("later", sla=50.0, tokens=10), 10)
    _, turned = offer(adm, task("later", sla=50.0, tokens=10), 10)
    assert turned.result().outcome is Outcome.REJECTED_QUEUE_FULL
    assert sched.slots_until_room("later") == 2 and sched.slots_until_room("soon") == 1
    first = adm.retry_after()
    assert first == (3, pytest.approx(2250, rel=0.02))  # the first slot, at 2 s
    assert adm.retry_after("soon") == first  # its own request is next
    assert adm.retry_after("idle") == first  # none of its task waits: any slot
    # "later" is admitted at the second slot, at 4 s: read at the grid time at or after.
    seconds, ms = adm.retry_after("later")
    assert seconds == 5 and 4250 <= ms <= 4250 + 0.09 * 4000
    loop.advance(2.0)
    seen.clear()
    adm.leave(soonest, served=True, tokens=100)  # "soon" takes the slot that freed
    assert sched.queued("soon") == 0 and sched.slots_until_room("later") == 1
    # Probes answered: the first slot's, and "soon"'s, whose queue has room.
    assert [(round(p, 1), round(o, 1)) for p, o in seen] == [(2.0, 2.0)] * 2
    seen.clear()
    loop.advance(2.0)
    adm.leave(second, served=True, tokens=200)  # and "later" the next one
    assert [round(o, 1) for _, o in seen] == [4.0] and 4.0 <= seen[0][0] <= 4.36


async def test_real_loop_timer_fires() -> None:
    t = task(sla=0.1, tokens=50, useful=0.15)
    sched = Scheduler(flat(1000.0), Policy(max_concurrency=1), tasks=[t], seed=0)
    adm = Admission(sched)
    a, _ = offer(adm, task(sla=0.1, tokens=50), 50)
    _, fb = offer(adm, task(sla=0.1, tokens=50), 50)
    d = await asyncio.wait_for(fb, 1.0)  # demoted at 0.05 s, expired at 0.10 s
    assert d.outcome is Outcome.REJECTED_EXPIRED
    adm.leave(a, served=True)
    adm.close()


class Boom(Exception):
    pass


def boom(*_: object, **__: object) -> None:
    raise Boom


async def test_an_offer_that_raises_leaves_nothing() -> None:
    adm, loop, sched = make()
    sched.offer = boom  # type: ignore[method-assign]
    with pytest.raises(Boom):
        offer(adm, task(), 10)
    assert adm.active == 0 and sched.load == 0 and sched.queued() == 0
    assert adm.trace == [] and loop.pending() == []


async def test_a_decision_that_fails_fails_only_its_own_request() -> None:
    adm, _, sched = make(max_concurrency=1, window_size=1)  # admitted in arrival order
    a, _ = offer(adm, task(), 10)
    b, fb = offer(adm, task(), 10)
    c, fc = offer(adm, task(), 10)

    def fail_for_b(d: Decision) -> None:
        if d.request is b:
            raise Boom

    adm.on_decision = fail_for_b
    adm.leave(a, served=True)  # admits b, whose decision fails
    assert isinstance(fb.exception(), Boom) and not fc.done()
    assert sched.is_running(b.id)
    assert adm.leave(b, served=False) is Outcome.CANCELLED_RUNNING  # its flow ends it
    assert fc.result().action is Action.ADMIT
    adm.leave(c, served=True)
    assert sched.load == 0 and adm.active == 0


async def test_drop_frees_the_slot_when_finish_raises() -> None:
    adm, _, sched = make(max_concurrency=1)
    a, _ = offer(adm, task(), 10)
    b, fb = offer(adm, task(), 10)
    sched.finish = boom  # type: ignore[method-assign]
    with pytest.raises(Boom):
        adm.leave(a, served=True)
    adm.drop(a)
    assert not sched.is_running(a.id) and adm.active == 1
    assert fb.result().action is Action.ADMIT  # the next one goes in all the same
    adm.drop(b)
    adm.drop(b)  # nothing left to drop
    assert sched.load == 0 and sched.queued() == 0 and adm.active == 0


Op = tuple[str, int, float]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["offer", "finish", "cancel", "advance"]),
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
    adm, loop, sched = make(speed=200.0, useful=2.5, max_concurrency=cap, queue_cap=6)
    offered: list[tuple[SchedRequest, asyncio.Future[Decision]]] = []
    left: set[str] = set()
    rng = random.Random(len(ops))

    def rejected(f: asyncio.Future[Decision]) -> bool:
        return f.done() and not f.cancelled() and f.result().action is Action.REJECT

    for op, i, x in ops:
        if op == "offer":
            sla = rng.choice([0.2, 0.5, 2.0])
            offered.append(offer(adm, task(sla=sla), rng.randint(1, 100)))
        elif op == "advance":
            loop.advance(x)
        elif offered:
            r, f = offered[i % len(offered)]
            first = r.id not in left and not rejected(f)
            out = adm.leave(r, served=op == "finish")
            left.add(r.id)
            assert (out is not None) == first
        live = [r for r, f in offered if r.id not in left and not rejected(f)]
        assert sched.load == sum(r.admitted_at is not None for r in live)
        assert sched.queued() == sum(r.admitted_at is None for r in live)
        assert adm.active == len(live)
        assert sched.load <= cap
    for r, _ in offered:
        adm.leave(r, served=False)
    assert sched.load == 0 and sched.queued() == 0 and adm.active == 0
    assert loop.pending() == []
