"""One profiling run against a live backend: check it, probe it, then drive every level.

The order of checks is the operator's: can the backend be reached, does it
serve the model asked for, does it honour ``ignore_eos`` and report ``usage``.
Each failure is a ProfileRunError with one line to print. Points go to the
points file as they come, so whatever stops the run (Ctrl-C included) leaves
them on disk for ``--resume`` and for fitting.

Each level is measured in ``rounds`` visits, the levels climbed in the first round
and descended in the second (and so on), each visit collecting its share of the
level's points. Something else that slows the backend for a while (another job on
the machine) then falls on a part of several levels rather than on the whole of
one, and a slow drift cancels between the way up and the way down. A level whose
rounds disagree by more than ``AGREEMENT`` (``points.agree``) is visited again (at most
``EXTRA_ROUNDS`` times), so that its mean averages more spells of whatever the
machine was doing; a round far off the others (``OUTLIER``) is left out of the fit,
and a visit takes its place even when the rounds left agree.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from saber.backend import BackendError, BackendInfo, describe, fetch_load
from saber.profile.errors import ProfileRunError
from saber.profile.points import AGREEMENT, LevelEnd, Point, PointsFile, agree
from saber.profile.requests import RequestSpec, Supply
from saber.profile.runner import LevelResult, Runner, waiting_allowance
from saber.profile.settings import RunSettings, SessionResult, minutes, root_url
from saber.profile.stream import RequestFailed, Target, send

PROBE_TOKENS = 16
"""Output tokens asked of the test request that checks ``ignore_eos`` and ``usage``."""

SPREAD_LIMIT = 3.0
"""A level whose p90 speed is this many times its p10 gets a warning. A task mix
spreads speeds by up to about 2x at high loads (prefill is a different share of
short and long requests); contention for the machine spreads them far more."""

EXTRA_ROUNDS = 2
"""At most this many more visits to a level whose rounds disagree."""

OUTLIER = 0.20
"""A round more than 20% off the median of its level's rounds is left out of the fit: the
backend was stalled or crowded out then. Closer ones are all kept and averaged."""


@dataclass(eq=False)
class Session:
    """Runs the levels of ``settings`` against the backend, appending to ``points``."""

    settings: RunSettings
    supply: Supply
    points: PointsFile
    api_key: str | None = field(default=None, kw_only=True)
    timeout_s: float = field(default=600.0, kw_only=True)
    console: Console = field(default_factory=lambda: Console(stderr=True), kw_only=True)
    progress: bool = field(default=True, kw_only=True)
    poll_s: float = field(default=0.2, kw_only=True)
    result: SessionResult = field(init=False, default_factory=SessionResult)
    _spread_warned: set[int] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        root = root_url(self.settings.base_url)
        self.target = Target(root, self.settings.model, self.settings.endpoint, self.api_key)

    async def run(self) -> SessionResult:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        timeout = httpx.Timeout(self.timeout_s, connect=10.0)
        # The auth header rides on the client, so /metrics and /version get it too.
        async with httpx.AsyncClient(
            timeout=timeout, limits=limits, headers=self.target.headers
        ) as client:
            info = await self._check_backend(client)
            self.result.backend = info
            await self._probe(client)
            if self.points.open():
                self._say(f"replacing the points of an earlier run in {self.points.path}")
            await self._levels(client, info)
        return self.result

    async def _check_backend(self, client: httpx.AsyncClient) -> BackendInfo:
        root = self.target.root
        try:
            info = await describe(client, root)
        except BackendError as exc:  # says what was asked of which URL, and what came back
            raise ProfileRunError(" ".join(str(exc).split())) from None
        except (httpx.HTTPError, OSError) as exc:
            raise ProfileRunError(f"cannot reach the backend at {root}: {_reason(exc)}") from None
        if self.target.model not in info.models:
            served = ", ".join(info.models) or "none"
            raise ProfileRunError(
                f"model {self.target.model!r} is not served at {root}; served: {served}"
            )
        self._say(f"backend: {info.kind} {info.version or '(version unknown)'} at {root}")
        return info

    async def _probe(self, client: httpx.AsyncClient) -> None:
        base = self.supply.get(0, 0)
        spec = RequestSpec(base.prompt, base.prompt_tokens, PROBE_TOKENS, base.task)
        try:
            out = await send(client, self.target, spec)
        except RequestFailed as exc:
            raise ProfileRunError(f"the backend rejected a test request: {exc}") from None
        except httpx.HTTPError as exc:
            raise ProfileRunError(
                f"test request to {self.target.url} failed: {_reason(exc)}"
            ) from None
        if not out.from_usage:
            self.result.usage_reported = False
            self._warn(
                "the backend reports no usage in its stream; counting streamed chunks as tokens"
            )
        if out.completion_tokens != PROBE_TOKENS:
            self.result.lengths_forced = False
            self._warn(
                f"the backend ignores ignore_eos: asked for {PROBE_TOKENS} tokens, got "
                f"{out.completion_tokens}; speeds use the observed lengths"
            )

    async def _levels(self, client: httpx.AsyncClient, info: BackendInfo) -> None:
        recorded = self.points.recorded
        settings = self.settings

        async def probe() -> Any:
            return await fetch_load(client, self.target.root, info.kind)

        plan = [
            (r, index, need)
            for r, index in settings.visits()
            if (need := self._need(r, settings.levels[index])) > 0
            and not self._above_saturation(settings.levels[index])
        ]
        if not plan and not self._disagreeing():
            self._say("every level is measured already; fitting the points")
            self._drop_disagreeing()
            return
        total = sum(self._size(settings.levels[i], need) for _, i, need in plan)
        self._say(settings.plan_text(len(plan), total))
        with self._progress() as bar:
            task = bar.add_task("profiling", total=total)

            def on_point(point: Point) -> None:
                self.points.add(point)
                bar.advance(task)

            runner = Runner(
                client, self.target, self.supply, on_point, probe=probe, poll_s=self.poll_s
            )
            for r, index, need in plan:
                level = settings.levels[index]
                if self._above_saturation(level):  # a lower level saturated since
                    bar.update(task, total=_total(bar) - self._size(level, need))
                    continue
                await self._visit(runner, bar, task, r, index)
            for _ in range(EXTRA_ROUNDS):
                again = self._disagreeing()
                if not again:
                    break
                bar.update(task, total=_total(bar) + sum(
                    self._size(level, settings.quota(settings.rounds)) for level in again
                ))  # fmt: skip
                for level in again:
                    r = max(p.round for p in recorded.points if p.level == level) + 1
                    self._warn(
                        f"load {level}: its rounds disagree ({self._round_speeds(level)} "
                        "tokens/s): was something else using the backend or this machine? "
                        "measuring it again"
                    )
                    await self._visit(runner, bar, task, r, settings.levels.index(level))
            self._drop_disagreeing()
        if self.result.short and self.result.lengths_forced:
            self._warn(
                f"{self.result.short} requests came back with fewer tokens than max_tokens; "
                "their speeds use the tokens they really produced"
            )
        if self.result.too_long:
            self._warn(f"{self.result.too_long} requests were rejected as too long and skipped")

    async def _visit(self, runner: Runner, bar: Progress, task: Any, r: int, index: int) -> None:
        """One visit to a level: round ``r``'s share of its points, or its time."""
        settings, recorded = self.settings, self.points.recorded
        level = settings.levels[index]
        need = self._need(r, level)
        warmup = settings.warmup_for(level)
        size = self._size(level, need)
        bar.update(task, description=f"load {level:>3}")
        allowance = waiting_allowance(level, self.supply.mean_output_tokens(index))
        started = bar.tasks[0].completed
        seconds = settings.seconds_for(level)
        ticker = None
        if seconds is not None:  # timed: the bar counts seconds
            ticker = asyncio.create_task(_tick(bar, task, started, seconds))
        try:
            result = await runner.run_level(
                level,
                index + r * len(settings.levels),
                need,
                warmup,
                allowance,
                round=r,
                seconds=seconds,
            )
        finally:
            if ticker is not None:
                ticker.cancel()
        self._note(result)
        if result.saturated is not None:
            reading = result.saturated
            self.points.end_level(
                LevelEnd(level, "saturated", round(reading.running), round(reading.waiting))
            )
            self._warn(
                f"load {level}: the backend queues requests ({reading.waiting:g} waiting, "
                f"{reading.running:g} running): {level} is past its max_num_seqs; "
                "not raising the load further"
            )
            higher = [lv for lv in settings.levels if lv > level]
            if higher:
                self._say(f"skipped loads {', '.join(map(str, higher))}")
            bar.update(task, total=_total(bar) - (started + size - bar.tasks[0].completed))
            return
        bar.update(task, completed=started + size)  # warm-up cut short by the end
        if r == settings.rounds - 1 and level not in recorded.ended:
            self.points.end_level(LevelEnd(level, "done", result.max_running, None))
        line = f"{self._level_line(level, r)}; {self._eta(bar)}"
        bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
        self._check_spread(level)

    def _need(self, r: int, level: int) -> int:
        """Counted points round ``r`` of ``level`` still needs (a timed level: its cap,
        until it has ended)."""
        if self.settings.level_s is not None and level in self.points.recorded.ended:
            return 0
        return self.settings.quota(r) - self._done(level, r)

    def _size(self, level: int, need: int) -> float:
        """What a visit adds to the progress bar: seconds when timed, else requests."""
        seconds = self.settings.seconds_for(level)
        return seconds if seconds is not None else need + self.settings.warmup_for(level)

    def _eta(self, bar: Progress) -> str:
        """The time left to the fit: a timed run's exactly, else as the bar reckons it
        from the requests' recent pace (higher loads finish requests faster: it falls)."""
        t = bar.tasks[0]
        if self.settings.level_s is not None:
            return f"ETA {minutes(max((t.total or 0.0) - t.completed, 0.0))}"
        left = t.time_remaining
        return "ETA not known yet" if left is None else f"ETA {minutes(left)} at the pace so far"

    def _done(self, level: int, r: int) -> int:
        """Counted points measured in round ``r`` of ``level``, dropped or not."""
        return len(self._rounds(level).get(r, []))

    def _above_saturation(self, level: int) -> bool:
        limit = self.points.recorded.saturated
        return limit is not None and level >= limit.level

    def _rounds(self, level: int) -> dict[int, list[float]]:
        """The speeds of each round of a level, dropped rounds included."""
        rounds: dict[int, list[float]] = {}
        for p in self.points.recorded.points:
            if p.level == level and not p.warmup:
                rounds.setdefault(p.round, []).append(p.speed)
        return dict(sorted(rounds.items()))

    def _round_speeds(self, level: int) -> str:
        return ", ".join(f"{statistics.fmean(v):.1f}" for v in self._rounds(level).values())

    def _close_rounds(self, level: int) -> tuple[int, ...]:
        """The rounds of a level within ``OUTLIER`` of the median of the rounds' means: with
        fewer than three, all of them (two cannot tell which one is off)."""
        means = self._round_means(level)
        if len(means) < 3:
            return tuple(means)
        middle = statistics.median(means.values())
        return tuple(r for r, mean in means.items() if abs(mean / middle - 1.0) <= OUTLIER)

    def _kept_rounds(self, level: int) -> tuple[int, ...]:
        """The rounds of a level the fit keeps: the close ones, and never fewer than the
        planned rounds. When the extra visits found no calmer spell (seen on llama.cpp: three
        of five visits to load 1 more than 20% off their median), the level keeps the
        rounds nearest the median, so it still has the points it was asked for."""
        means = self._round_means(level)
        close = self._close_rounds(level)
        floor = min(self.settings.rounds, len(means))
        if len(close) >= floor:
            return close
        middle = statistics.median(means.values())
        nearest = sorted(means, key=lambda r: abs(means[r] - middle))[:floor]
        return tuple(sorted(nearest))

    def _round_means(self, level: int) -> dict[int, float]:
        return {r: statistics.fmean(v) for r, v in self._rounds(level).items()}

    def _disagreeing(self) -> list[int]:
        """Levels whose kept rounds still disagree and may be visited again."""
        out = []
        for level in self.settings.levels:
            if self._above_saturation(level) or self.settings.rounds < 2:
                continue
            rounds = self._rounds(level)
            if len(rounds) < self.settings.rounds:
                continue  # not measured yet (an interrupted run)
            extra = len(rounds) - self.settings.rounds
            kept = self._close_rounds(level)
            # Each round left out needs a visit in its place, even when the rest agree.
            left_out = len(rounds) - len(kept)
            if extra < EXTRA_ROUNDS and (left_out > extra or not agree([rounds[r] for r in kept])):
                out.append(level)
        return out

    def _drop_disagreeing(self) -> None:
        """Leave out of the fit the rounds of each level that are outliers among its rounds."""
        recorded = self.points.recorded
        for level in self.settings.levels:
            rounds = self._rounds(level)
            kept = self._kept_rounds(level)
            if len(self._close_rounds(level)) < len(kept):
                self._warn(
                    f"load {level}: its rounds still disagree ({self._round_speeds(level)} "
                    f"tokens/s); kept the {len(kept)} nearest their median. Profile again on a "
                    "quieter machine if this level matters"
                )
            for r in rounds:
                if r not in kept and (level, r) not in recorded.dropped:
                    self.points.drop(level, r)

    def _check_spread(self, level: int) -> None:
        """Warn (once) when one load's speeds differ wildly: something else was using the
        machine."""
        speeds = sorted(p.speed for p in self.points.recorded.counted(level))
        if len(speeds) < 10 or level in self._spread_warned:
            return
        p10, p90 = speeds[len(speeds) // 10], speeds[(9 * len(speeds)) // 10]
        if p10 * SPREAD_LIMIT < p90:
            self._spread_warned.add(level)
            self._warn(
                f"load {level}: speeds range from {p10:.1f} to {p90:.1f} tokens/s (p10 to p90); "
                "was something else using the backend or this machine?"
            )

    def _level_line(self, level: int, r: int) -> str:
        pts = self.points.recorded.counted(level, r)
        rounds = self.settings.rounds
        name = f"load {level}" + (f" (round {r + 1})" if rounds > 1 else "")
        if not pts:
            return f"{name}: no points"
        speed = sum(p.speed for p in pts) / len(pts)
        load = sum(p.load for p in pts) / len(pts)
        ttfts = [p.ttft_s for p in pts if p.ttft_s is not None]
        ttft = f", TTFT {1000 * sum(ttfts) / len(ttfts):.0f} ms" if ttfts else ""
        return (
            f"{name}: {len(pts)} points, {load:.2f} in flight on average, "
            f"{speed:.1f} tokens/s per request{ttft}"
        )

    def _note(self, result: LevelResult) -> None:
        self.result.short += result.short
        self.result.too_long += result.too_long
        if result.probe_error and not self.result.metrics_unavailable:
            self.result.metrics_unavailable = True
            self._warn(
                f"cannot read the backend's /metrics ({result.probe_error}); "
                "saturation is not checked"
            )

    def _progress(self) -> Progress:
        return Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("s" if self.settings.level_s is not None else "requests"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.progress,
            transient=False,
        )

    def _say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _warn(self, text: str) -> None:
        self.result.messages.append(text)
        self.console.print(
            f"warning: {text}", style="yellow", markup=False, highlight=False, soft_wrap=True
        )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, httpx.ConnectError) and not text:
        return "connection refused"
    return text.splitlines()[0] if text else type(exc).__name__


def run_session(session: Session) -> SessionResult:
    """Run a session to the end; Ctrl-C propagates as KeyboardInterrupt after cleanup."""
    try:
        return asyncio.run(session.run())
    finally:
        session.points.close()


__all__ = [
    "AGREEMENT",
    "EXTRA_ROUNDS",
    "OUTLIER",
    "PROBE_TOKENS",
    "RunSettings",
    "Session",
    "SessionResult",
    "agree",
    "root_url",
    "run_session",
]


def _total(bar: Progress) -> float:
    """The bar's planned total (the one task it shows; set when the task was added)."""
    return bar.tasks[0].total or 0.0


async def _tick(bar: Progress, task: Any, started: float, seconds: float) -> None:
    """Advance a timed visit's bar with the clock, up to its ``seconds``."""
    begun = time.monotonic()
    while True:
        await asyncio.sleep(0.5)
        bar.update(task, completed=started + min(time.monotonic() - begun, seconds))
