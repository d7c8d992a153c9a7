"""One profiling run against a live backend: check it, probe it, then drive every level.

The order of checks is the operator's: can the backend be reached, does it
serve the model asked for, does it honour ``ignore_eos`` and report ``usage``.
Each failure is a ProfileRunError with one line to print. Points go to the
points file as they come, so whatever stops the run (Ctrl-C included) leaves
them on disk for ``--resume`` and for fitting.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
from saber.profile.points import LevelEnd, Point, PointsFile
from saber.profile.requests import RequestSpec, Supply
from saber.profile.runner import LevelResult, Runner, waiting_allowance
from saber.profile.stream import Endpoint, RequestFailed, Target, send

PROBE_TOKENS = 16
"""Output tokens asked of the test request that checks ``ignore_eos`` and ``usage``."""

SPREAD_LIMIT = 3.0
"""A level whose p90 speed is this many times its p10 gets a warning. A task mix
spreads speeds by up to about 2x at high loads (prefill is a different share of
short and long requests); contention for the machine spreads them far more."""


@dataclass(frozen=True)
class RunSettings:
    """What a run measures; kept as the points file's first line so a resume can check it."""

    base_url: str
    model: str
    endpoint: Endpoint
    source: str
    levels: tuple[int, ...]
    requests_per_level: int
    warmup: int | None  # None: L requests at load L
    seed: int

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "base_url": self.base_url,
            "model": self.model,
            "endpoint": self.endpoint,
            "source": self.source,
            "levels": list(self.levels),
            "requests_per_level": self.requests_per_level,
            "warmup": self.warmup,
            "seed": self.seed,
            "started_at": datetime.now(UTC).isoformat(),
        }

    def warmup_for(self, level: int) -> int:
        return level if self.warmup is None else self.warmup


@dataclass
class SessionResult:
    """What the run learnt beyond the points themselves."""

    backend: BackendInfo | None = None
    lengths_forced: bool = True
    usage_reported: bool = True
    short: int = 0
    too_long: int = 0
    metrics_unavailable: bool = False
    messages: list[str] = field(default_factory=list)


def root_url(base_url: str) -> str:
    """The server's root: accepts ``http://host:port`` and the OpenAI-style ``.../v1``."""
    root = base_url.strip().rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class Session:
    """Runs the levels of ``settings`` against the backend, appending to ``points``."""

    def __init__(
        self,
        settings: RunSettings,
        supply: Supply,
        points: PointsFile,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        console: Console | None = None,
        progress: bool = True,
        poll_s: float = 0.2,
    ) -> None:
        self.settings, self.supply, self.points = settings, supply, points
        root = root_url(settings.base_url)
        self.target = Target(root, settings.model, settings.endpoint, api_key)
        self.timeout_s = timeout_s
        self.console = console or Console(stderr=True)
        self.show_progress = progress
        self.poll_s = poll_s
        self.result = SessionResult()

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

        plan = []
        for index, level in enumerate(settings.levels):
            end = recorded.ended.get(level)
            if end is not None and end.status == "saturated":
                break
            if end is None:
                plan.append((index, level, settings.requests_per_level - recorded.measured(level)))
        if not plan:
            self._say("every level is measured already; fitting the points")
            return
        with self._progress() as bar:
            total = sum(need + settings.warmup_for(level) for _, level, need in plan)
            task = bar.add_task("profiling", total=total)

            def on_point(point: Point) -> None:
                self.points.add(point)
                bar.advance(task)

            runner = Runner(
                client, self.target, self.supply, on_point, probe=probe, poll_s=self.poll_s
            )
            expected = 0
            for n, (index, level, need) in enumerate(plan):
                expected += need + settings.warmup_for(level)
                bar.update(task, description=f"load {level:>3}")
                allowance = waiting_allowance(level, self.supply.mean_output_tokens(index))
                result = await runner.run_level(
                    level, index, need, settings.warmup_for(level), allowance
                )
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
                    rest = plan[n + 1 :]
                    bar.update(task, total=bar.tasks[0].completed)
                    if rest:
                        self._say(f"skipped loads {', '.join(str(lv) for _, lv, _ in rest)}")
                    break
                self.points.end_level(LevelEnd(level, "done", result.max_running, None))
                bar.update(task, completed=expected)  # warm-up cut short by the level's end
                bar.console.print(
                    self._level_line(level), markup=False, highlight=False, soft_wrap=True
                )
                self._check_spread(level)
        if self.result.short and self.result.lengths_forced:
            self._warn(
                f"{self.result.short} requests came back with fewer tokens than max_tokens; "
                "their speeds use the tokens they really produced"
            )
        if self.result.too_long:
            self._warn(f"{self.result.too_long} requests were rejected as too long and skipped")

    def _check_spread(self, level: int) -> None:
        """Warn when one load's speeds differ wildly: something else was using the machine."""
        speeds = sorted(
            p.speed for p in self.points.recorded.points if p.level == level and not p.warmup
        )
        if len(speeds) < 10:
            return
        p10, p90 = speeds[len(speeds) // 10], speeds[(9 * len(speeds)) // 10]
        if p10 * SPREAD_LIMIT < p90:
            self._warn(
                f"load {level}: speeds range from {p10:.1f} to {p90:.1f} tokens/s (p10 to p90); "
                "was something else using the backend or this machine?"
            )

    def _level_line(self, level: int) -> str:
        pts = [p for p in self.points.recorded.points if p.level == level and not p.warmup]
        if not pts:
            return f"load {level}: no points"
        speed = sum(p.speed for p in pts) / len(pts)
        load = sum(p.load for p in pts) / len(pts)
        ttfts = [p.ttft_s for p in pts if p.ttft_s is not None]
        ttft = f", TTFT {1000 * sum(ttfts) / len(ttfts):.0f} ms" if ttfts else ""
        return (
            f"load {level}: {len(pts)} points, {load:.2f} in flight on average, "
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
            TextColumn("requests"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.show_progress,
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


__all__ = ["PROBE_TOKENS", "RunSettings", "Session", "SessionResult", "root_url", "run_session"]
