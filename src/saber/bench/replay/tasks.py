"""The task types a replayed trace is scheduled by, and each request's SLO.

A request that names a task is of the shipped task type of that name. Requests that
name none (the Azure trace's) are of one task type, ``UNNAMED_TASK``, built from the
trace as an operator would configure it: its mean prompt and answer are the trace's
(what the logs tell), its cap ``max_tokens`` is what clients send (by default the
smallest power of two at least the longest answer), and its end-to-end SLA is set on
each engine: a multiple of the 90th percentile of each request's time alone there.

A request is good when it meets every part of its SLO that is stated (vLLM's rule,
``SimRecord.met_sla``): its task's, each part the trace states for the request itself
replacing the task's; ``--goodput`` replaces every task's SLO (``bench/_goodput.py``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence

import numpy as np

from saber.bench._runner import serve_alone
from saber.config import TaskType
from saber.engine import EnginePreset
from saber.workload import NO_CAP, UNNAMED_TASK, TraceRequest

USEFUL_OVER_SLA = 20.0
"""The unnamed task's ``useful_s`` over its SLA (how long a late answer is still
wanted): the shipped task types' ratio is 15 to 60."""
_PLACEHOLDER_SLA_S = 1.0  # before the engine's SLA is known; scores nothing


def cap_of(requests: Sequence[TraceRequest], max_tokens: int | None = None) -> int:
    """The unnamed task's cap: ``max_tokens``, else the smallest power of two at least
    the longest answer. Raises ValueError when an answer is longer than the cap."""
    longest = max(r.output_tokens for r in requests)
    cap = max_tokens or 1 << math.ceil(math.log2(longest))
    if cap < longest:
        raise ValueError(f"--max-tokens {cap} is below the trace's longest answer ({longest})")
    return cap


def unnamed_task(
    requests: Sequence[TraceRequest], *, cap: int, sla_s: float = _PLACEHOLDER_SLA_S
) -> TaskType:
    """The task type of requests that name none, from those requests."""
    return TaskType(
        name=UNNAMED_TASK,
        mean_input_tokens=max(1, round(statistics.fmean(r.prompt_tokens for r in requests))),
        mean_output_tokens=max(1, round(statistics.fmean(r.output_tokens for r in requests))),
        sla_s=sla_s,
        max_tokens=cap,
        useful_s=USEFUL_OVER_SLA * sla_s,
    )


def trace_tasks(
    requests: Sequence[TraceRequest], shipped: Mapping[str, TaskType], max_tokens: int | None
) -> dict[str, TaskType]:
    """The task types of a trace's requests. Raises ValueError naming a task type that
    is neither shipped nor ``UNNAMED_TASK``."""
    named = {r.task for r in requests} - {UNNAMED_TASK}
    unknown = sorted(named - set(shipped))
    if unknown:
        raise ValueError(
            f"the trace names task type(s) {', '.join(unknown)}; a replay knows the shipped "
            f"ones ({', '.join(shipped)}), and a request that names none is {UNNAMED_TASK!r}"
        )
    tasks = {name: shipped[name] for name in sorted(named)}
    unnamed = [r for r in requests if r.task == UNNAMED_TASK]
    if unnamed:
        tasks[UNNAMED_TASK] = unnamed_task(unnamed, cap=cap_of(unnamed, max_tokens))
    return tasks


def with_caps(
    requests: Sequence[TraceRequest], tasks: Mapping[str, TaskType]
) -> list[TraceRequest]:
    """Each request's ``max_tokens`` where the trace states none: its task's cap."""
    return [
        dataclasses.replace(r, max_tokens=tasks[r.task].max_tokens) if r.max_tokens == NO_CAP else r
        for r in requests
    ]


def alone_p90(
    requests: Sequence[TraceRequest], preset: EnginePreset, tasks: Mapping[str, TaskType]
) -> float:
    """The 90th percentile of the requests' times from arrival to last token, each alone
    on an idle ``preset`` (``serve_alone``)."""
    times = [rec.e2e for rec in serve_alone(requests, preset, tasks).records]
    return float(np.percentile(np.asarray(times, dtype=float), 90))


def on_engine(tasks: Mapping[str, TaskType], sla_s: float | None) -> dict[str, TaskType]:
    """``tasks`` with the unnamed task's SLA (and useful_s) set to this engine's."""
    out = dict(tasks)
    if UNNAMED_TASK in out:
        assert sla_s is not None
        out[UNNAMED_TASK] = out[UNNAMED_TASK].model_copy(
            update={"sla_s": sla_s, "useful_s": USEFUL_OVER_SLA * sla_s}
        )
    return out
