"""The real loop: one seeded open-loop stream, replayed in real time against a live engine,
once through saber-gateway and once straight to the engine.

Both runs send the same requests at the same offsets, with output lengths forced
(``max_tokens`` + ``ignore_eos``), and read the engine's own /metrics every
``sample_s``: what the engine holds (running + waiting) is the "in flight" that
admission control is meant to keep down, whichever way the requests came. A request
meets its SLA when its stream ends within ``sla_s`` of its scheduled arrival, so time
spent queued in the gateway, or in the engine's own queue, counts against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import httpx
import numpy as np

from saber.backend import BackendError, BackendKind, fetch_load
from saber.config import TaskType
from saber.profile.requests import RequestSpec
from saber.profile.stream import RequestFailed, Target, send
from saber.speed import SpeedModel
from saber.workload import TraceRequest, make_prompt


@dataclass(frozen=True, slots=True)
class Served:
    """One request's fate; ``latency_s`` runs from its scheduled arrival to its last byte."""

    id: str
    task: str
    sla_s: float
    latency_s: float | None
    completion_tokens: int
    error: str | None = None

    @property
    def met(self) -> bool:
        return self.latency_s is not None and self.latency_s <= self.sla_s


@dataclass
class RunResult:
    """One replay: every request's fate, and the engine's load sampled over the run."""

    name: str
    served: list[Served]
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # t, running, waiting
    duration_s: float = 0.0

    def tasks(self) -> set[str]:
        return {s.task for s in self.served}

    def in_flight(self) -> list[float]:
        return [running + waiting for _, running, waiting in self.samples]

    def goodput(self, tasks: set[str] | None = None) -> float:
        """The share of the requests (of ``tasks``) that met their SLA."""
        chosen = [s for s in self.served if tasks is None or s.task in tasks]
        return sum(s.met for s in chosen) / len(chosen) if chosen else float("nan")

    def summary(self, short: set[str]) -> dict[str, object]:
        flight = self.in_flight() or [float("nan")]
        return {
            "run": self.name,
            "requests": len(self.served),
            "errors": sum(s.error is not None for s in self.served),
            "engine_in_flight_mean": statistics.fmean(flight),
            "engine_in_flight_max": max(flight),
            "engine_running_mean": statistics.fmean(r for _, r, _ in self.samples)
            if self.samples
            else float("nan"),
            "goodput": self.goodput(),
            "short_sla_goodput": self.goodput(short),
            "goodput_per_task": {t: self.goodput({t}) for t in sorted(self.tasks())},
            "duration_s": self.duration_s,
            "samples": len(self.samples),
        }

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "served": [asdict(s) for s in self.served]}


def short_sla_tasks(trace: Sequence[TraceRequest], tasks: Mapping[str, TaskType]) -> set[str]:
    """The trace's task types with short SLAs, the ones an IDE user waits on: those below
    the widest gap (as a ratio) between its SLAs. Table I's: code_qna and code_summary
    (1 s), then 8 and 12 s."""
    slas = sorted({tasks[r.task].sla_s for r in trace})
    if len(slas) < 2:
        return {r.task for r in trace}
    gaps = [b / a for a, b in itertools.pairwise(slas)]
    limit = slas[gaps.index(max(gaps))]
    return {r.task for r in trace if tasks[r.task].sla_s <= limit}


def rescale_tasks(
    tasks: Mapping[str, TaskType],
    *,
    input_scale: float,
    output_scale: float,
    reference: SpeedModel | None = None,
    target: SpeedModel | None = None,
    max_load: float = 64.0,
) -> dict[str, TaskType]:
    """Task types with prompt and output lengths scaled, for an engine other than the one
    their SLAs were set for.

    With ``reference`` (the speed curve the SLAs were set on) and ``target`` (the engine's
    curve), each SLA is set to be met up to the same load on the target as on the
    reference (at most ``max_load``, the highest load profiled): the regime in which the
    paper's SLAs bind, whatever the two curves' shapes. Without them, SLAs are kept.
    """

    def scaled(n: int | None, by: float) -> int | None:
        return None if n is None else max(1, round(n * by))

    out = {}
    for name, task in tasks.items():
        out_tokens = scaled(task.mean_output_tokens, output_scale)
        sla = task.sla_s
        if reference is not None and target is not None:
            load = min(_tolerated_load(reference, task.mean_output_tokens / task.sla_s), max_load)
            sla = out_tokens / float(target.predict(load))
        out[name] = task.model_copy(
            update={
                "mean_input_tokens": scaled(task.mean_input_tokens, input_scale),
                "mean_output_tokens": out_tokens,
                "max_tokens": scaled(task.max_tokens, output_scale),
                "expected_output_tokens": scaled(task.expected_output_tokens, output_scale),
                "sla_s": sla,
            }
        )
    return out


def _tolerated_load(model: SpeedModel, needed: float) -> float:
    """The highest load (1..1024) at which ``model`` still gives ``needed`` tokens/s."""
    loads = np.arange(1.0, 1025.0)
    ok = loads[model.predict(loads) >= needed]
    return float(ok.max()) if ok.size else 1.0


async def replay(
    name: str,
    trace: Sequence[TraceRequest],
    tasks: Mapping[str, TaskType],
    *,
    url: str,
    model: str,
    engine_url: str,
    engine_kind: BackendKind,
    via_gateway: bool,
    api_key: str | None = None,
    sample_s: float = 0.25,
    request_timeout_s: float = 120.0,
) -> RunResult:
    """Send ``trace`` to ``url`` in real time and wait for every answer (each at most
    ``request_timeout_s``). Through the gateway, the model name carries the task type
    (``model:task``); straight to the engine, it is the plain model name."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=len(trace))
    timeout = httpx.Timeout(request_timeout_s, connect=10.0)
    samples: list[tuple[float, float, float]] = []
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start = time.perf_counter()
        done = asyncio.Event()
        sampler = asyncio.create_task(
            _sample(engine_url, engine_kind, start, sample_s, samples, done)
        )

        async def one(index: int, req: TraceRequest) -> Served:
            task = tasks[req.task]
            target = Target(url, f"{model}:{req.task}" if via_gateway else model, api_key=api_key)
            spec = RequestSpec(
                make_prompt(req.task, req.prompt_tokens, offset=index * 7),
                req.prompt_tokens,
                req.max_tokens,
                req.task,
            )
            due = start + req.arrival
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            try:
                out = await asyncio.wait_for(send(client, target, spec), request_timeout_s)
            except (RequestFailed, httpx.HTTPError, TimeoutError) as exc:
                return Served(req.id, req.task, task.sla_s, None, 0, f"{type(exc).__name__}: {exc}")
            return Served(req.id, req.task, task.sla_s, out.end - due, out.completion_tokens)

        served = await asyncio.gather(*(one(i, r) for i, r in enumerate(trace)))
        duration = time.perf_counter() - start
        done.set()
        await sampler
    return RunResult(name, list(served), samples, duration)


async def _sample(
    engine_url: str,
    kind: BackendKind,
    start: float,
    every_s: float,
    out: list[tuple[float, float, float]],
    done: asyncio.Event,
) -> None:
    """Read the engine's running/waiting counts until ``done``; a failed read is skipped."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        while not done.is_set():
            try:
                load = await fetch_load(client, engine_url, kind)
                out.append((time.perf_counter() - start, load.running, load.waiting))
            except BackendError:
                pass
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), every_s)


async def drained(
    engine_url: str, kind: BackendKind, *, timeout_s: float = 120.0, every_s: float = 0.5
) -> bool:
    """Wait until the engine holds no request (True), at most ``timeout_s``."""
    deadline = time.perf_counter() + timeout_s
    async with httpx.AsyncClient(timeout=5.0) as client:
        while time.perf_counter() < deadline:
            try:
                load = await fetch_load(client, engine_url, kind)
                if load.running + load.waiting == 0:
                    return True
            except BackendError:
                pass
            await asyncio.sleep(every_s)
    return False
