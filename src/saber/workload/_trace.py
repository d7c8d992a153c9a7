"""Request traces: generated from a workload mix, written and replayed as JSONL."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from saber.config import TaskType, Workload
from saber.workload._arrivals import gamma_arrivals, poisson_arrivals
from saber.workload._joint import JOINT_TASKS, joint_outputs
from saber.workload._lengths import sample_input_tokens, sample_output_tokens

Mode = Literal["oracle", "realistic"]
Lengths = Literal["independent", "joint"]
"""How answers' lengths relate to their requests: ``independent`` (the paper's: drawn
on their own) or ``joint`` (a translation's follows its input: ``_joint``)."""
SIM_BYTES_PER_TOKEN = 3.6
"""Bytes a prompt token stands for in a trace that gives only tokens: about what code
models' tokenizers make of source code."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace.

    ``output_tokens`` is the length the model really generates; ``max_tokens`` is
    what the client asks for: the true length in oracle mode (as in the paper),
    the task type's cap in realistic mode.
    """

    id: str
    task: str
    arrival: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    # What the gateway would see of the prompt besides: its size in bytes (None: its
    # tokens times SIM_BYTES_PER_TOKEN) and a fingerprint of what it shares with other
    # requests (its system prompt, its template); None: nothing shared.
    prompt_bytes: int | None = None
    fingerprint: str | None = None
    # Its own SLO, in parts, where it states one (None: its task's).
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    @property
    def size_in_bytes(self) -> int:
        """Its prompt's size in bytes, as a gateway reads it off the request."""
        if self.prompt_bytes is not None:
            return self.prompt_bytes
        return round(self.prompt_tokens * SIM_BYTES_PER_TOKEN)


def generate_trace(
    workload: Workload,
    tasks: Mapping[str, TaskType],
    *,
    rps: float,
    n: int,
    seed: int = 0,
    mode: Mode = "oracle",
    arrival: Literal["poisson", "gamma"] = "poisson",
    cv: float = 1.0,
    lengths: Lengths = "independent",
) -> list[TraceRequest]:
    """A seeded trace. The same seed gives the same arrivals, tasks and true
    lengths in both modes, so oracle and realistic runs are directly comparable; and
    with ``lengths="joint"`` the same trace but for the answers of JOINT_TASKS, drawn
    from their inputs (a controlled comparison)."""
    rng = np.random.default_rng(seed)
    if arrival == "poisson":
        times = poisson_arrivals(rng, rps, n)
    else:
        times = gamma_arrivals(rng, rps, n, cv)
    names = sorted(workload.mix)
    weights = np.array([workload.mix[name] for name in names], dtype=float)
    picks = rng.choice(len(names), size=n, p=weights / weights.sum())
    out_len = np.zeros(n, dtype=np.int64)
    in_len = np.zeros(n, dtype=np.int64)
    for idx, name in enumerate(names):
        mask = picks == idx
        count = int(mask.sum())
        if count:
            out_len[mask] = sample_output_tokens(rng, tasks[name], count)
            in_len[mask] = sample_input_tokens(rng, tasks[name], count)
    if lengths == "joint":
        joint_rng = np.random.default_rng([seed, 1])  # the draws above stay as they are
        for idx, name in enumerate(names):
            mask = picks == idx
            if name in JOINT_TASKS and mask.any():
                out_len[mask] = joint_outputs(joint_rng, tasks[name], in_len[mask])
    elif lengths != "independent":
        raise ValueError(f"unknown lengths {lengths!r}; known: independent, joint")
    trace = []
    for i in range(n):
        task = tasks[names[picks[i]]]
        true_len = int(out_len[i])
        trace.append(
            TraceRequest(
                id=f"r{i:06d}",
                task=task.name,
                arrival=float(times[i]),
                prompt_tokens=int(in_len[i]),
                output_tokens=true_len,
                max_tokens=true_len if mode == "oracle" else task.max_tokens,
            )
        )
    return trace


def generate_phased_trace(
    workload: Workload,
    tasks: Mapping[str, TaskType],
    *,
    phases: Sequence[tuple[float, float]],
    seed: int = 0,
    mode: Mode = "realistic",
    arrival: Literal["poisson", "gamma"] = "poisson",
    cv: float = 1.0,
    lengths: Lengths = "independent",
) -> list[TraceRequest]:
    """A seeded trace whose rate changes: ``phases`` is (duration s, RPS) in order,
    e.g. low load, a burst above capacity, then moderate load. Each phase is
    generated like ``generate_trace`` (its own sub-seed) and shifted to its start."""
    out: list[TraceRequest] = []
    start = 0.0
    for k, (duration, rps) in enumerate(phases):
        if duration <= 0:
            raise ValueError(f"phase {k}: duration must be > 0")
        # Enough arrivals to cover the phase, then cut at its end.
        n = max(int(rps * duration * 1.5) + 50, 1)
        part = generate_trace(
            workload,
            tasks,
            rps=rps,
            n=n,
            seed=seed * 1000 + k,
            mode=mode,
            arrival=arrival,
            cv=cv,
            lengths=lengths,
        )
        for req in part:
            if req.arrival >= duration:
                break
            out.append(
                TraceRequest(
                    id=f"r{len(out):06d}",
                    task=req.task,
                    arrival=start + req.arrival,
                    prompt_tokens=req.prompt_tokens,
                    output_tokens=req.output_tokens,
                    max_tokens=req.max_tokens,
                )
            )
        start += duration
    return out


def write_trace(path: str | Path, trace: Iterable[TraceRequest]) -> None:
    with Path(path).open("w", encoding="utf-8") as fh:
        for req in trace:
            fields = {k: v for k, v in asdict(req).items() if v is not None}
            fh.write(json.dumps(fields) + "\n")


def read_trace(path: str | Path) -> list[TraceRequest]:
    """Read a JSONL trace; a bad line fails with its file and line number."""
    path = Path(path)
    out = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(TraceRequest(**json.loads(line)))
            except (json.JSONDecodeError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a trace request: {exc}") from exc
    return sorted(out, key=lambda r: r.arrival)
