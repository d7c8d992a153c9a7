"""SLOs given as vLLM's serving benchmark takes them: ``--goodput ttft:MS tpot:MS
e2el:MS``, each part in milliseconds, or as a scale of the engine's own time for that
part (``ttft:3x``: three times the 90th percentile of the time to first token each of the
task's requests takes alone on an idle engine). A request is good when it meets every
part given (``saber.config.Slo``), which is how vLLM counts goodput."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from saber.bench._runner import alone_times
from saber.config import Part, Slo, TaskType, Workload, tpot_of
from saber.engine import EnginePreset
from saber.workload import TraceRequest, generate_trace

NAMES: dict[str, Part] = {"ttft": "ttft", "tpot": "tpot", "e2el": "e2e"}
"""vLLM's names for the parts."""
OWN_QUANTILE = 0.9
"""A scale ``Nx`` multiplies this quantile of the engine's own times."""


@dataclass(frozen=True)
class Goodput:
    """The parts given: each a limit in seconds, or a scale of the engine's own time."""

    limits: tuple[tuple[Part, float, bool], ...]  # (part, value, is a scale)

    @property
    def scaled(self) -> bool:
        return any(scale for _, _, scale in self.limits)

    def slo(self, own: Mapping[Part, float] | None = None) -> Slo:
        """The SLO these parts make; ``own``: the engine's own times (for scales)."""
        values: dict[str, float] = {}
        for part, value, scale in self.limits:
            if scale:
                if own is None:
                    raise ValueError(f"{part}: a scale needs the engine's own times")
                value *= own[part]
            values[f"{part}_s"] = value
        return Slo(**values)

    def describe(self) -> str:
        vllm = {v: k for k, v in NAMES.items()}
        return " ".join(
            f"{vllm[p]}:{v:g}x" if s else f"{vllm[p]}:{1000 * v:g}" for p, v, s in self.limits
        )


def parse_goodput(items: Sequence[str]) -> Goodput:
    """``["ttft:500", "tpot:2x"]`` (milliseconds, or ``Nx``); ValueError says what is wrong."""
    limits: dict[Part, tuple[float, bool]] = {}
    for item in items:
        name, sep, text = item.partition(":")
        if not sep or name not in NAMES:
            raise ValueError(f"{item!r}: expected ttft:MS, tpot:MS or e2el:MS (or NAME:Nx)")
        scale = text.endswith("x")
        try:
            value = float(text[:-1] if scale else text)
        except ValueError:
            raise ValueError(f"{item!r}: {text!r} is not a number of milliseconds") from None
        if not value > 0 or value == float("inf"):
            raise ValueError(f"{item!r}: a limit must be a positive finite number")
        part = NAMES[name]
        if part in limits:
            raise ValueError(f"{name} given twice")
        limits[part] = (value, scale) if scale else (value / 1000.0, False)
    if not limits:
        raise ValueError("--goodput needs at least one of ttft, tpot, e2el")
    return Goodput(tuple((p, v, s) for p, (v, s) in limits.items()))


def goodput_argument(text: str) -> Goodput:
    """An argparse type for ``--goodput "ttft:500 tpot:50"`` (space or comma separated)."""
    try:
        return parse_goodput(text.replace(",", " ").split())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def own_times(
    preset: EnginePreset, trace: Sequence[TraceRequest], quantile: float = OWN_QUANTILE
) -> dict[str, dict[Part, float]]:
    """Per task of ``trace``, the ``quantile`` of each part over its requests served
    each alone on an idle engine: the times a scale multiplies."""
    by_task: dict[str, list[tuple[float, float, float]]] = {}
    for r in trace:
        first, last = alone_times(preset, r.prompt_tokens, r.output_tokens)
        by_task.setdefault(r.task, []).append((first, tpot_of(last, first, r.output_tokens), last))
    out: dict[str, dict[Part, float]] = {}
    for task, rows in by_task.items():
        arr = np.asarray(rows, dtype=float)
        q = np.quantile(arr, quantile, axis=0)
        out[task] = {"ttft": float(q[0]), "tpot": float(q[1]), "e2e": float(q[2])}
    return out


def with_goodput(
    tasks: Mapping[str, TaskType],
    goodput: Goodput | None,
    own: Mapping[str, Mapping[Part, float]] | None = None,
) -> dict[str, TaskType]:
    """``tasks`` with the SLO ``goodput`` gives, in place of their own (vLLM's: one
    SLO for every request; scales per task, of its own times in ``own``)."""
    if goodput is None:
        return dict(tasks)
    out = {}
    for name, task in tasks.items():
        times = None if own is None else own.get(name)
        out[name] = task.with_slo(goodput.slo(times)) if (times or not goodput.scaled) else task
    return out


OWN_SAMPLE = 400
"""Requests of a workload whose lone times a scale reads."""


def goodput_tasks(
    tasks: Mapping[str, TaskType],
    goodput: Goodput | None,
    preset: EnginePreset,
    workload: Workload,
) -> dict[str, TaskType]:
    """``with_goodput`` on ``preset``'s own times over a sample of ``workload``."""
    if goodput is None or not goodput.scaled:
        return with_goodput(tasks, goodput)
    sample = generate_trace(workload, tasks, rps=1.0, n=OWN_SAMPLE, seed=0)
    return with_goodput(tasks, goodput, own_times(preset, sample))
