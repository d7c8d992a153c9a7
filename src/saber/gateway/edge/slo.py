"""A request's own SLO, from llm-d's headers: ``x-slo-ttft-ms`` and ``x-slo-tpot-ms``,
and ``x-slo-e2e-ms`` beside them. Each replaces its task's limit for that part, within
the bounds the operator allows (the API key's ``slo_bounds``, else the task's; by
default each part the task states, from its own limit up to ten times it: a request
may relax its SLO but not tighten it, since a tighter limit is served sooner). A value
that is not a positive number of milliseconds, or is outside the bounds, is a 400 that
names the header."""

from __future__ import annotations

import math

from starlette.datastructures import Headers

from saber.config import Part, Slo, TaskType
from saber.gateway.edge.access import Key
from saber.gateway.errors import invalid

HEADERS: dict[str, Part] = {
    "x-slo-ttft-ms": "ttft",
    "x-slo-tpot-ms": "tpot",
    "x-slo-e2e-ms": "e2e",
}


def requested_slo(headers: Headers, task: TaskType, key: Key | None) -> Slo | None:
    """The limits the request states for itself (None: none), checked."""
    values: dict[str, float] = {}
    if key is not None and key.slo_bounds is not None:  # the key's bounds, else the task's
        bounds, whose = key.slo_bounds, f"API key {key.name}"
    else:
        bounds, whose = None, f"task type {task.name}"
    for name, part in HEADERS.items():
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            ms = float(raw.strip())
        except ValueError:
            ms = math.nan
        if not (ms > 0 and math.isfinite(ms)):
            raise invalid(
                f"{name} must be a positive number of milliseconds, got {raw[:40]!r}",
                param=name,
                code="invalid_slo",
            )
        allowed = (bounds or task.bounds).get(part)
        if allowed is None:
            raise invalid(
                f"{name}: {whose} takes no {part} limit of a request's own (slo_bounds)",
                param=name,
                code="slo_out_of_bounds",
            )
        low, high = allowed
        if not low <= ms / 1000.0 <= high:
            raise invalid(
                f"{name} is {ms:g} ms; {whose} allows {1000 * low:g} to {1000 * high:g} ms",
                param=name,
                code="slo_out_of_bounds",
            )
        values[f"{part}_s"] = ms / 1000.0
    return Slo(**values) if values else None
