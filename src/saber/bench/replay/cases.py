"""What ``saber-bench replay TRACE`` replays: a trace file, or a named case.

- ``azure-code``: one hour of Azure's code service (``saber.workload.AZURE_CODE_TRACE``):
  no task types, bursty arrivals, answers independent of their prompts.
- ``joint-W1``, ``joint-W2``, ``joint-W3``: the paper's workloads with code
  translation's answer drawn from its input by CodeXGLUE's length ratio
  (``generate_trace(..., lengths="joint")``), Poisson arrivals, seeded.
- ``W1``, ``W2``, ``W3``: the same traces with every answer drawn on its own (the
  control: the same arrivals, tasks and prompts, ``CASE_SEED``).
"""

from __future__ import annotations

from pathlib import Path

from saber.bench._grid import shipped_tasks
from saber.config import load_workloads
from saber.workload import AZURE_CODE_TRACE, TraceRequest, generate_trace, load_trace

CASE_SEED = 46000
"""The seed of the generated cases: joint-Wn and Wn differ only in answer lengths."""
AZURE_CODE = "azure-code"
_WORKLOADS = ("W1", "W2", "W3")
CASES = (AZURE_CODE, *(f"joint-{w}" for w in _WORKLOADS), *_WORKLOADS)


def load_case(trace: str, needed: int) -> list[TraceRequest]:
    """The requests of ``trace``, a case of ``CASES`` or a trace file (``load_trace``);
    a generated case has ``needed`` requests. Raises ValueError (or ``load_trace``'s
    TraceFormatError) when it is neither, or cannot be read."""
    if trace == AZURE_CODE:
        return load_trace(AZURE_CODE_TRACE)
    workload = trace.removeprefix("joint-")
    if trace in CASES:
        tasks = shipped_tasks()
        return generate_trace(
            load_workloads(tasks=tasks)[workload],
            tasks,
            rps=1.0,
            n=needed,
            seed=CASE_SEED,
            mode="realistic",
            lengths="joint" if trace.startswith("joint-") else "independent",
        )
    if not Path(trace).is_file():
        raise ValueError(f"{trace}: neither a trace file nor a case ({', '.join(CASES)})")
    return load_trace(trace)
