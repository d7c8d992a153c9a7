"""The real-time driver keeps the engine's timeline: oversleeping does not add up."""

from __future__ import annotations

import asyncio

import pytest

from saber.engine import Engine, EngineRequest, get_preset
from saber.sim.http.driver import RealTimeDriver


class FakeTime:
    """A clock that only moves when the driver sleeps, always overshooting."""

    def __init__(self, overshoot: float) -> None:
        self.now = 100.0
        self.overshoot = overshoot
        self.sleeps = 0

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.now += delay + self.overshoot
        self.sleeps += 1
        await asyncio.sleep(0)


def _virtual_finish(output_tokens: int) -> float:
    engine = Engine(get_preset("paper"))
    engine.add(EngineRequest("a", 10, output_tokens))
    end = 0.0
    while (result := engine.step(end)) is not None:
        end = result.end
    return end


async def _drive(fake: FakeTime, scale: float, output_tokens: int) -> tuple[Engine, list[int]]:
    engine = Engine(get_preset("paper"))
    driver = RealTimeDriver(engine, time_scale=scale, clock=fake.clock, sleep=fake.sleep)
    await driver.start()
    got: list[int] = []
    done = asyncio.Event()

    def sink(n: int, finished: bool, error: str | None) -> None:
        got.append(n)
        if finished:
            done.set()

    driver.submit(EngineRequest("a", 10, output_tokens), sink)
    await asyncio.wait_for(done.wait(), 5)
    await driver.stop()
    return engine, got


@pytest.mark.parametrize("scale", [1.0, 10.0])
async def test_small_oversleeps_do_not_drift(scale: float) -> None:
    fake = FakeTime(overshoot=0.001)  # 1 ms late every time, far below resync
    engine, got = await _drive(fake, scale, 200)
    assert sum(got) == 200 and len(got) == 200  # one token per step, each delivered
    # The engine's timeline is exactly the virtual-time one, oversleeping or not.
    assert engine.clock == pytest.approx(_virtual_finish(200), rel=1e-9)
    # On the wall, it ends at most one overshoot after its last deadline, not 200 of them.
    ideal = engine.clock / scale
    assert ideal - 1e-9 <= fake.now - 100.0 <= ideal + 0.001 + 1e-9


async def test_a_long_stall_resyncs_the_engine_clock() -> None:
    fake = FakeTime(overshoot=0.5)  # every sleep half a second late: beyond resync
    engine, _ = await _drive(fake, 1.0, 5)
    assert engine.clock > _virtual_finish(5) + 1.0  # the timeline jumped to the wall


async def test_abort_during_a_step_delivers_nothing_more() -> None:
    engine = Engine(get_preset("paper"))
    driver = RealTimeDriver(engine, time_scale=50.0)
    await driver.start()
    got: list[int] = []
    delivering = asyncio.Event()

    def sink(n: int, finished: bool, error: str | None) -> None:
        got.append(n)
        delivering.set()

    driver.submit(EngineRequest("a", 10, 10_000), sink)
    await asyncio.wait_for(delivering.wait(), 5)  # it is running: a step has delivered
    assert driver.abort("a") and engine.idle
    seen = len(got)
    await asyncio.sleep(0.05)  # many steps' time at this scale: none delivers
    assert len(got) == seen
    await driver.stop()
