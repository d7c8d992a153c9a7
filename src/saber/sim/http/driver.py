"""Steps the engine model on the wall clock and hands each step's tokens out.

The loop: compute one step at engine time ``t``, sleep until the step's end on the
wall clock (``wall = origin + engine_time / time_scale``), then deliver its tokens,
and repeat; sleep on an event while the engine is idle. Deadlines are absolute: a
step starts where the last one ended, not where the sleep happened to wake up, so
oversleeping does not add up. Only when the loop falls behind by more than
``resync_s`` of wall time (a machine stalled for a while) does the engine clock jump forward.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from saber._serving import cancel_and_wait
from saber.engine import Engine, EngineRequest, StepResult

log = logging.getLogger("saber.sim.http")

# Called with (new tokens, finished) after each step that touched the request;
# with (0, True) and an error message when the engine failed.
Sink = Callable[[int, bool, str | None], None]


@dataclass(eq=False)
class RealTimeDriver:
    """Owns an ``Engine`` and the asyncio task that steps it in real time."""

    engine: Engine
    time_scale: float = field(default=1.0, kw_only=True)
    resync_s: float = field(default=0.25, kw_only=True)
    clock: Callable[[], float] = field(default=time.monotonic, kw_only=True)
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, kw_only=True)
    _origin: float = field(init=False)
    _sinks: dict[str, Sink] = field(init=False, default_factory=dict)
    _busy: bool = field(init=False, default=False)  # a step ran since the engine was idle
    _wake: asyncio.Event | None = field(init=False, default=None)
    _task: asyncio.Task[None] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._origin = self.clock()

    # -- clock -------------------------------------------------------------

    def engine_now(self) -> float:
        """Engine time that corresponds to the wall clock now."""
        return (self.clock() - self._origin) * self.time_scale

    def wall_at(self, engine_time: float) -> float:
        return self._origin + engine_time / self.time_scale

    # -- requests ----------------------------------------------------------

    def submit(self, req: EngineRequest, sink: Sink) -> None:
        """Queue ``req``; ``sink`` hears about its tokens. Raises ValueError if the
        engine refuses it (too long for the KV cache)."""
        now = self.engine_now()
        req.arrival = min(now, self.engine.clock) if self._busy else now
        self.engine.add(req)
        self._sinks[req.id] = sink
        if self._wake is not None:
            self._wake.set()

    def abort(self, req_id: str) -> bool:
        """Free the request's slot and KV now; its sink hears nothing more."""
        self._sinks.pop(req_id, None)
        return self.engine.abort(req_id)

    # -- loop --------------------------------------------------------------

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="saber-sim-engine")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            if self.engine.idle:
                self._busy = False
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                result = self.engine.step(self._step_start(), max_steps=1)
            except Exception as exc:  # a bug in the model must not hang every client
                log.exception("engine step failed")
                self._fail_all(f"engine step failed: {exc}")
                continue
            if result is None:
                continue
            self._busy = True
            delay = self.wall_at(result.end) - self.clock()
            if delay > 0:
                await self.sleep(delay)
            self._deliver(result)

    def _step_start(self) -> float:
        now = self.engine_now()
        if not self._busy or now - self.engine.clock > self.resync_s * self.time_scale:
            return now
        return self.engine.clock

    def _deliver(self, result: StepResult) -> None:
        done = {r.id for r in result.finished}
        for rid, n in result.tokens.items():
            sink = self._sinks.pop(rid, None) if rid in done else self._sinks.get(rid)
            if sink is not None:
                sink(n, rid in done, None)

    def _fail_all(self, message: str) -> None:
        for rid in list(self._sinks):
            sink = self._sinks.pop(rid)
            self.engine.abort(rid)
            sink(0, True, message)
