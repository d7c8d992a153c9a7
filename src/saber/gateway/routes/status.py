"""GET /saber/status: what the scheduler sees right now, as JSON.

The top level is the first backend's (the only one of a single-backend config);
``backends`` lists every backend of the pool."""

from __future__ import annotations

import time
from typing import Any

from saber.gateway.assembly import Gateway
from saber.gateway.replicas import Replica
from saber.gateway.upstream.watch import BackendWatch

BUDGET = ("sequences", "interval_s")
"""What a fixed cluster.headroom lets this gateway admit at a backend per interval."""


def status(gw: Gateway) -> dict[str, Any]:
    """Queues per task and tier, the load, f(L) and f(L+1), the profile, recent decisions."""
    now = gw.admission.now()
    snap = gw.scheduler.snapshot(gw.tasks)
    for d in snap["recent_decisions"]:
        d["age_s"] = round(now - d.pop("at"), 3)
    s = gw.settings
    p = s.profile
    return {
        "gateway": {
            "uptime_s": round(time.time() - gw.started_at, 1),
            "backend": gw.config.backend.url,
            "transport": gw.config.backend.transport,
            "requests_active": gw.admission.active,
        },
        "backend": _backend(gw.backend, snap["load"]),
        # Sequences: each running request counts n (or best_of) x its prompts.
        "load": snap["load"],
        "running_requests": len(gw.scheduler.running()),
        "max_sequences_per_request": gw.config.sequence_limit(),
        "predicted_speed_tokens_per_s": {
            **snap["predicted_speed"],
            **_read_at(gw.scheduler.elsewhere[1], snap["load"]),
        },
        "calibration": snap["calibration"],
        "learning": gw.learning.summary(),
        "protected_speed_tokens_per_s": snap["protected_speed"],
        "queues": snap["queues"],
        "policy": gw.policy_dict(),
        "profile": {
            "path": str(s.profile_path),
            "default": s.profile_is_default,
            "kind": p.kind,
            "params": p.params,
            "r2": p.r2,
            "mape": p.mape,
            "model": p.model.name,
            "backend": p.backend.model_dump(exclude_none=True),
            "created_at": p.created_at.isoformat(),
            # What tasks with a TTFT SLA are admitted against (null: one token at f(L)).
            "ttft_fit": None if p.ttft_fit is None else p.ttft_fit.model_dump(),
        },
        # Prompts' sizes at arrival: bytes over this ratio, learned from usage.prompt_tokens
        # (or the backend's own count, with backend.tokenize).
        "prompt_size": {**snap["prompt_size"], "tokenize": gw.config.backend.tokenize},
        "tasks": {
            name: {
                "slo": t.slo.model_dump(exclude_none=True),
                "sla_s": t.sla_s,
                "sla_kind": t.sla_kind,
                "useful_s": t.useful_s,
                "configured_output_tokens": t.expected_tokens,
                "learned_output_tokens": snap["lengths"].get(name),
            }
            for name, t in gw.tasks.items()
        },
        "recent_decisions": snap["recent_decisions"],
        "backends": [_replica(gw, r) for r in gw.replicas],
        "cluster": gw.config.cluster.model_dump(),
    }


def _read_at(elsewhere: int, load: int) -> dict[str, Any]:
    """The loads f is read at for ``at_load`` and ``at_load_plus_1``, and why: on an idle
    engine both are f(1), since a request admitted then runs alone."""
    now, next_ = max(1, load + elsewhere), max(1, load + 1 + elsewhere)
    return {
        "read_at": {"at_load": now, "at_load_plus_1": next_},
        "explain": (
            "tokens/s each request is predicted to get (f of the profile, times calibration): "
            "at_load with the load as it is, at_load_plus_1 with one more request admitted; "
            "a load below 1 reads f(1), so an idle engine shows f(1) for both"
            + (", and sequences seen running from other gateways are added" if elsewhere else "")
        ),
    }


def _replica(gw: Gateway, r: Replica) -> dict[str, Any]:
    """One backend of the pool: its health, load, speed model and what it learned."""
    sched = r.scheduler
    seen, counted = sched.elsewhere
    load = sched.load
    return {
        "name": r.name,
        "url": r.settings.url,
        "ejected": r.ejected,
        "breaker": {
            "state": r.breaker.state.value,
            "failures_in_a_row": r.breaker.failures,
            "ejections": r.breaker.ejections,
        },
        "stale_metrics": r.stale,
        "load": load,
        "queued": sched.queued(),
        "elsewhere": {"seen": seen, "with_headroom": counted},
        "budget": None if sched.budget is None else dict(zip(BUDGET, sched.budget, strict=True)),
        "predicted_speed_tokens_per_s": {
            "at_load": sched.predicted_speed(load),
            "at_load_plus_1": sched.predicted_speed(load + 1),
            "max": sched.max_speed,
            **_read_at(counted, load),
        },
        "calibration": round(sched.calibration, 4),
        "profile": str(r.profile.profile_path),
        "learning": None if r.learning is None else r.learning.summary(),
        "engine": _backend(r.watch, load),
    }


def _backend(b: BackendWatch, in_flight: int) -> dict[str, Any]:
    """The engine, and its own count of running requests next to the gateway's load
    (both count sequences): running above ``gateway_in_flight`` is traffic that
    bypasses the gateway."""
    age = b.scraped_age_s()
    return {
        "url": b.url,
        "kind": b.kind.value,
        "kind_source": b.kind_source,
        "version": b.version,
        "models": b.models,
        "forward_priority": b.priority.forward,
        "forward_priority_source": b.priority.source,
        "scheduling_policy": b.priority.policy,
        "running": None if b.load is None else b.load.running,
        "waiting": None if b.load is None else b.load.waiting,
        "scraped_age_s": None if age is None else round(age, 3),
        "metrics_interval_s": b.interval or None,
        "scrape_errors": b.scrape_errors,
        "last_scrape_error": b.last_error,
        "gateway_in_flight": in_flight,
    }
