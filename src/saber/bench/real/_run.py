"""The real loop: one seeded open-loop stream, replayed in real time against a live engine,
once through saber-gateway and once straight to the engine.

Both runs send the same requests at the same offsets, with output lengths forced
(``max_tokens`` + ``ignore_eos``), and read the engine's own /metrics every
``sample_s``: what the engine holds (running + waiting) is the "in flight" that
admission control is meant to keep down, whichever way the requests came. A request
meets its SLA when its stream ends within ``sla_s`` of its scheduled arrival, so time
spent queued in the gateway, or in the engine's own queue, counts against it.

``run_real`` is ``saber-bench real`` as a library call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx
import numpy as np

from saber import wire
from saber.backend import BackendError, BackendKind, detect_kind, fetch_load
from saber.config import TaskType, load_workloads
from saber.profile.requests import RequestSpec
from saber.profile.stream import RequestFailed, Target, send
from saber.speed import SpeedModel
from saber.workload import TraceRequest, generate_trace, make_prompt


@dataclass(frozen=True, slots=True)
class Served:
    """One request's fate; ``latency_s`` runs from its scheduled arrival to its last byte,
    ``ttft_s`` to its first generated text. It meets its SLA when it meets every part of
    its task's SLO (``met``; by default the whole answer within ``sla_s``)."""

    id: str
    task: str
    sla_s: float
    latency_s: float | None
    completion_tokens: int
    error: str | None = None
    ttft_s: float | None = None
    slo_met: bool | None = None  # every part of its task's SLO; None: judged by sla_s

    @property
    def met(self) -> bool:
        if self.slo_met is not None:
            return self.slo_met
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
        mean, sla = task.mean_output_tokens, task.sla_s
        out_tokens = scaled(mean, output_scale)
        if reference is not None and target is not None and mean and sla and out_tokens:
            load = min(_tolerated_load(reference, mean / sla), max_load)
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
            latency = out.end - due
            ttft = None if out.first is None else out.first - due
            met = task.slo.meets(ttft=ttft, e2e=latency, output_tokens=out.completion_tokens)
            return Served(
                req.id, req.task, task.sla_s, latency, out.completion_tokens, None, ttft, met
            )

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


class RealRunError(Exception):
    """The real loop cannot run: an engine or gateway unreachable, SLAs that differ, ..."""


@dataclass
class RealComparison:
    """Both replays of one stream, and which of its task types have short SLAs."""

    runs: list[RunResult]
    short_sla_tasks: set[str]

    def summaries(self) -> list[dict[str, object]]:
        return [r.summary(self.short_sla_tasks) for r in self.runs]

    def summary(self, run: str) -> dict[str, object]:
        """The summary of the run named ``run`` ("direct" or "gateway")."""
        return next(r for r in self.runs if r.name == run).summary(self.short_sla_tasks)

    def to_dict(self) -> dict[str, Any]:
        """What ``saber-bench real --out`` writes: the summaries and every request."""
        return {
            "short_sla_tasks": sorted(self.short_sla_tasks),
            "summaries": self.summaries(),
            "runs": [r.to_dict() for r in self.runs],
        }


def run_real(
    engine: str,
    gateway: str,
    model: str,
    tasks: Mapping[str, TaskType],
    *,
    workload: str = "W3",
    rps: float = 8.0,
    requests: int = 120,
    seed: int = 0,
    api_key: str | None = None,
    first: Literal["direct", "gateway"] = "direct",
    timeout_s: float = 120.0,
    say: Callable[[str], None] | None = None,
) -> RealComparison:
    """Replay one seeded Poisson stream of ``requests`` at ``rps`` against the live
    ``engine`` (its URL, without /v1) twice: straight to it and through the ``gateway``
    in front of it, ``first`` first, each once the engine holds nothing.

    ``tasks`` must carry the gateway's SLAs (RealRunError names those that differ);
    ``workload`` is one of the shipped mixes over them. ``say`` gets a line as each
    replay starts.
    """
    return asyncio.run(
        _run_real(
            engine, gateway, model, tasks, workload, rps, requests, seed, api_key, first,
            timeout_s, say or (lambda _: None),
        )
    )  # fmt: skip


async def _run_real(
    engine: str,
    gateway: str,
    model: str,
    tasks: Mapping[str, TaskType],
    workload: str,
    rps: float,
    requests: int,
    seed: int,
    api_key: str | None,
    first: str,
    timeout_s: float,
    say: Callable[[str], None],
) -> RealComparison:
    workloads = load_workloads(tasks=dict(tasks))
    if workload not in workloads:
        raise RealRunError(f"unknown workload {workload!r}")
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            kind: BackendKind = await detect_kind(client, engine)
        slas = await _gateway_slas(gateway, api_key)
    except (BackendError, httpx.HTTPError, KeyError, ValueError) as exc:
        raise RealRunError(f"cannot reach the engine or the gateway: {exc}") from None
    trace = generate_trace(workloads[workload], tasks, rps=rps, n=requests, seed=seed)
    differ = {
        t: (tasks[t].slo.model_dump(exclude_none=True), slas.get(t))
        for t in workloads[workload].mix
        if slas.get(t) != tasks[t].slo.model_dump(exclude_none=True)
    }
    if differ:
        raise RealRunError(
            f"the tasks and the gateway disagree on SLAs (task: (tasks, gateway)): {differ}; "
            "give the gateway's own task types (its config file will do)"
        )
    order = ["direct", "gateway"] if first == "direct" else ["gateway", "direct"]
    runs = []
    for name in order:
        if not await drained(engine, kind):
            raise RealRunError(f"the engine at {engine} is still busy after 120 s")
        say(f"{name}: {len(trace)} requests at {rps:g}/s ({kind} engine)")
        via_gateway = name == "gateway"
        runs.append(
            await replay(
                name,
                trace,
                tasks,
                url=gateway if via_gateway else engine,
                model=model,
                engine_url=engine,
                engine_kind=kind,
                via_gateway=via_gateway,
                api_key=api_key if via_gateway else None,
                request_timeout_s=timeout_s,
            )
        )
    return RealComparison(runs, short_sla_tasks(trace, tasks))


async def _gateway_slas(url: str, api_key: str | None) -> dict[str, dict[str, float]]:
    """Each task type's SLO as the gateway states it (its parts, in seconds)."""
    async with httpx.AsyncClient(timeout=10.0, headers=wire.auth_headers(api_key)) as client:
        resp = await client.get(url.rstrip("/") + "/saber/status")
    resp.raise_for_status()
    return {name: t["slo"] for name, t in resp.json()["tasks"].items()}
