"""What saber-profile sends: prompts and forced output lengths, from a task mix or a dataset.

Each load level draws its own seeded sequence, so a level measures the same mix
whether it runs first, last or after a resume. Prompts are ``make_prompt`` text
(one token per word, a task marker first) with a different filler offset per
request, so a backend's prefix cache cannot make prefill look cheaper than it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from saber.config import TaskType, Workload
from saber.profile.errors import ProfileRunError
from saber.workload import count_tokens, generate_trace, make_prompt

_BATCH = 512


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send: the prompt, its length in words, and the output length to force."""

    prompt: str
    prompt_tokens: int
    max_tokens: int
    task: str | None = None


class Supply:
    """An endless, reproducible stream of requests per load level."""

    def __init__(self, description: str) -> None:
        self.description = description
        self._cache: dict[int, list[RequestSpec]] = {}

    def get(self, level_index: int, i: int) -> RequestSpec:
        """The ``i``-th request of the ``level_index``-th level."""
        specs = self._cache.setdefault(level_index, [])
        while len(specs) <= i:
            specs.extend(self._more(level_index, len(specs)))
        return specs[i]

    def mean_output_tokens(self, level_index: int = 0) -> float:
        """Mean forced output length over the first requests of a level."""
        sample = [self.get(level_index, i) for i in range(_BATCH)]
        return sum(spec.max_tokens for spec in sample) / len(sample)

    def _more(self, level_index: int, start: int) -> list[RequestSpec]:
        raise NotImplementedError


class WorkloadSupply(Supply):
    """Requests drawn from a workload's task mix, with the task types' length distributions."""

    def __init__(self, workload: Workload, tasks: Mapping[str, TaskType], seed: int = 0) -> None:
        super().__init__(f"workload {workload.name}")
        self._workload, self._tasks, self._seed = workload, tasks, seed

    def _more(self, level_index: int, start: int) -> list[RequestSpec]:
        seed = (self._seed * 1009 + level_index) * 7919 + start
        trace = generate_trace(self._workload, self._tasks, rps=1.0, n=_BATCH, seed=seed)
        return [
            RequestSpec(
                make_prompt(r.task, r.prompt_tokens, offset=start + k),
                r.prompt_tokens,
                r.output_tokens,
                r.task,
            )
            for k, r in enumerate(trace)
        ]


class DatasetSupply(Supply):
    """Requests from a JSONL file, cycled in order; each level starts at a different record."""

    def __init__(self, path: Path, specs: Sequence[RequestSpec]) -> None:
        super().__init__(f"dataset {path}")
        self._specs = list(specs)

    def _more(self, level_index: int, start: int) -> list[RequestSpec]:
        n = len(self._specs)
        first = level_index * 97 + start
        return [self._specs[(first + k) % n] for k in range(_BATCH)]


def read_dataset(path: Path) -> DatasetSupply:
    """Read a JSONL dataset; ProfileRunError names the line of a bad record.

    A record needs ``prompt_tokens`` (or a ``prompt`` text) and ``output_tokens``
    or ``max_tokens``; the output length forced is ``output_tokens`` when both are
    given (a realistic-mode trace keeps the cap in ``max_tokens``). ``task`` is
    optional. Traces written by ``saber.workload.write_trace`` qualify.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileRunError(f"cannot read dataset {path}: {exc}") from None
    specs = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            specs.append(_spec(json.loads(line), offset=lineno))
        except (json.JSONDecodeError, TypeError, ValueError, KeyError) as exc:
            raise ProfileRunError(f"{path}:{lineno}: not a dataset record: {exc}") from None
    if not specs:
        raise ProfileRunError(f"dataset {path} has no records")
    return DatasetSupply(path, specs)


def _spec(record: object, offset: int) -> RequestSpec:
    if not isinstance(record, dict):
        raise ValueError("expected a JSON object")
    task = record.get("task")
    if task is not None and not isinstance(task, str):
        raise ValueError("task must be a string")
    out = record.get("output_tokens", record.get("max_tokens"))
    if isinstance(out, bool) or not isinstance(out, int) or out < 1:
        raise ValueError("needs output_tokens or max_tokens, an integer >= 1")
    prompt = record.get("prompt")
    if isinstance(prompt, str):
        return RequestSpec(prompt, max(count_tokens(prompt), 1), out, task)
    n = record["prompt_tokens"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError("prompt_tokens must be an integer >= 1")
    return RequestSpec(make_prompt(task or "", n, offset=offset), n, out, task)
