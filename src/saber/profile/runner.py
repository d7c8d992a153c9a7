"""The closed loop: hold exactly L requests in flight and time each one.

L workers each send a request, wait for its stream to end and send the next at
once, so the load stays at L except for the moment between one request's end and
its successor's start; each point records the load it really saw (the time
average of the in-flight count over its life). The first ``warmup`` requests a
level starts are the burst that began together and are flagged, not counted.
When enough counted points are in (or, for a timed level, its time is up), the
requests still running are cancelled, which closes their connections so the backend
aborts them: they did not run at load L to the end.

While a level runs, a probe reads the backend's queue (``/metrics``) every
``poll_s``; ``is_saturated`` decides from the reads whether L is past the
backend's ``max_num_seqs`` (or its KV cache), and then the level stops and is
reported saturated.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from saber.profile.errors import ProfileRunError
from saber.profile.points import Point
from saber.profile.requests import Supply
from saber.profile.stream import RequestFailed, Target, send

SATURATION_READS = 5
"""Consecutive /metrics reads that must agree before a level is called saturated."""


def waiting_allowance(level: int, mean_output_tokens: float) -> int:
    """Waiting requests to expect at ``level`` from arrivals between engine steps alone.

    A request that arrives during an engine step waits for the next one, and in a
    closed loop about L / (output tokens per request) requests are replaced per
    step. saber-sim counts them as waiting when scraped mid-step; vLLM and
    llama.cpp mostly do not.
    """
    return math.ceil(level / max(mean_output_tokens, 1.0)) + 1


def is_saturated(
    reads: Sequence[QueueReading], level: int, allowance: int, finished: Sequence[int] = ()
) -> bool:
    """Whether the last SATURATION_READS reads show the backend holding requests back.

    Each must show more than ``allowance`` requests waiting, and either the
    running count pinned (within one) at a ceiling, as a full batch is, or a
    quarter of the load waiting, as when the KV cache is the limit. A backend
    that merely lags (a busy machine) also shows waiting requests, but its
    running count moves from read to read. One that stalls outright shows the
    same counts on every read, but finishes nothing: ``finished``, the requests
    finished by the time of each read, must have grown over the reads (when given).
    A level within the allowance of ``max_num_seqs`` can go unnoticed; its points
    then include a little queueing.
    """
    last = list(reads)[-SATURATION_READS:]
    if len(last) < SATURATION_READS or any(r.waiting <= allowance for r in last):
        return False
    done = list(finished)[-SATURATION_READS:]
    if len(done) == SATURATION_READS and done[-1] <= done[0]:
        return False
    running = [r.running for r in last]
    pinned = max(running) - min(running) <= 1
    return pinned or all(r.waiting >= level / 4 for r in last)


MAX_FAILURE_SHARE = 0.1
"""Share of failed requests (beyond the first few) at which profiling gives up."""


class QueueReading(Protocol):
    """The backend's own count of running and waiting requests (``saber.backend.BackendLoad``)."""

    @property
    def running(self) -> float: ...
    @property
    def waiting(self) -> float: ...


LoadProbe = Callable[[], Awaitable[QueueReading]]


@dataclass
class LevelResult:
    """How one level went."""

    level: int
    measured: int = 0
    attempts: int = 0
    finished: int = 0
    failures: int = 0
    too_long: int = 0
    short: int = 0
    saturated: QueueReading | None = None
    max_running: int | None = None
    probe_error: str | None = None


class InFlight:
    """The in-flight count as a step function, with its running integral.

    A request notes the integral when it starts; at its end, the difference over
    its duration is the time-averaged count it ran with.
    """

    def __init__(self, now: float) -> None:
        self._count = 0
        self._area = 0.0
        self._at = now

    def enter(self, now: float) -> float:
        self._advance(now)
        self._count += 1
        return self._area

    def leave(self, now: float, started: float, area: float) -> float:
        self._advance(now)
        self._count -= 1
        span = now - started
        return (self._area - area) / span if span > 0 else float(self._count + 1)

    def _advance(self, now: float) -> None:
        self._area += self._count * (now - self._at)
        self._at = now


class Runner:
    """Runs load levels against one target, handing each finished request to ``on_point``."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        target: Target,
        supply: Supply,
        on_point: Callable[[Point], None],
        *,
        probe: LoadProbe | None = None,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.client, self.target, self.supply = client, target, supply
        self.on_point, self.probe, self.poll_s = on_point, probe, poll_s
        self._clock = clock
        self._origin = clock()

    async def run_level(
        self,
        level: int,
        index: int,
        need: int,
        warmup: int,
        allowance: int = 0,
        *,
        round: int = 0,
        seconds: float | None = None,
    ) -> LevelResult:
        """Hold ``level`` requests in flight until ``need`` counted points are in, or
        ``seconds`` have passed (warm-up included).

        ``index`` picks the request sequence; ``round`` is recorded in each point;
        more than ``allowance`` requests waiting in the backend on consecutive reads
        end the level as saturated. ProfileRunError if the backend fails too many
        requests.
        """
        result = LevelResult(level)
        if need <= 0:
            return result
        done = asyncio.Event()
        inflight = InFlight(self._clock())
        next_i = 0

        async def worker() -> None:
            nonlocal next_i
            while not done.is_set():
                i, next_i = next_i, next_i + 1
                spec = self.supply.get(index, i)
                start = self._clock()
                area = inflight.enter(start)
                result.attempts += 1
                try:
                    out = await send(self.client, self.target, spec)
                except (RequestFailed, httpx.TransportError) as exc:
                    inflight.leave(self._clock(), start, area)
                    self._failed(result, exc)
                    continue
                load = inflight.leave(out.end, start, area)
                result.finished += 1
                if out.completion_tokens <= 0:
                    self._failed(result, RequestFailed(200, "the stream carried no tokens"))
                    continue
                if out.completion_tokens != spec.max_tokens:
                    result.short += 1
                point = Point(
                    level=level,
                    load=max(load, 1.0),
                    prompt_tokens=out.prompt_tokens or spec.prompt_tokens,
                    output_tokens=out.completion_tokens,
                    max_tokens=spec.max_tokens,
                    ttft_s=None if out.first is None else out.first - out.sent,
                    exec_s=out.end - out.sent,
                    start_s=out.sent - self._origin,
                    task=spec.task,
                    warmup=i < warmup,
                    round=round,
                )
                if done.is_set():
                    return
                self.on_point(point)
                if not point.warmup:
                    result.measured += 1
                    if result.measured >= need:
                        done.set()

        async def timer(limit: float) -> None:
            await asyncio.sleep(limit)
            done.set()

        workers = [asyncio.create_task(worker()) for _ in range(level)]
        watcher = asyncio.create_task(self._watch(level, allowance, result, done))
        finished = asyncio.create_task(done.wait())
        tasks: list[asyncio.Task[Any]] = [*workers, watcher, finished]
        if seconds is not None:
            tasks.append(asyncio.create_task(timer(seconds)))
        try:
            pending: set[asyncio.Task[Any]] = {finished, *workers}
            while not finished.done():
                completed, pending = await asyncio.wait(
                    pending, return_when=asyncio.FIRST_COMPLETED
                )
                for task in completed:
                    error = None if task is finished else task.exception()
                    if error is not None:  # ProfileRunError: too many failures
                        raise error
        finally:
            # Cancelling closes the streams still open, so the backend aborts them.
            done.set()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        return result

    def _failed(self, result: LevelResult, exc: Exception) -> None:
        if isinstance(exc, RequestFailed) and exc.too_long:
            result.too_long += 1
            if result.too_long > 3 and result.too_long > MAX_FAILURE_SHARE * result.attempts:
                raise ProfileRunError(
                    f"the backend rejects many requests as too long ({exc.message}); "
                    "profile with a --dataset of shorter requests, or give the backend "
                    "a longer context"
                )
            return
        result.failures += 1
        if result.failures >= 3 and result.failures > MAX_FAILURE_SHARE * result.attempts:
            reason = str(exc) or type(exc).__name__
            raise ProfileRunError(
                f"the backend failed {result.failures} of {result.attempts} requests "
                f"at load {result.level}: {reason}"
            )

    async def _watch(
        self, level: int, allowance: int, result: LevelResult, done: asyncio.Event
    ) -> None:
        if self.probe is None:
            return
        reads: list[QueueReading] = []
        finished: list[int] = []
        while not done.is_set():
            await asyncio.sleep(self.poll_s)
            try:
                reading = await self.probe()
            except Exception as exc:  # a backend without /metrics: profile without the check
                result.probe_error = str(exc) or type(exc).__name__
                return
            result.max_running = max(result.max_running or 0, round(reading.running))
            reads.append(reading)
            finished.append(result.finished)
            if is_saturated(reads, level, allowance, finished):
                result.saturated = reading
                done.set()
                return
