"""A finished request's metrics and its one log line. Called only from ``Flow.finalize``.

Every time is on the admission clock and measured from the request's one arrival
stamp: the queue wait to when it left the queue, TTFT to its first generated
token, the latency (and so the SLA verdict) to when it was finalized, which for a
served request is when the backend's answer was complete.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from saber.gateway.access_log import log_request
from saber.gateway.honesty import overran
from saber.scheduler import Outcome

if TYPE_CHECKING:
    from saber.gateway.flow import Flow


def account(
    flow: Flow, outcome: Outcome, status: int, error: str | None, fault: str | None
) -> None:
    """Count the request in the metrics and write its log line."""
    gw = flow.gw
    m = gw.metrics.task(flow.task_name)
    m.outcomes[outcome].inc()
    if fault is not None:
        gw.metrics.backend_errors.labels(fault).inc()
    queue_s = None
    if flow.left_queue is not None and outcome is not Outcome.REJECTED_QUEUE_FULL:
        queue_s = max(flow.left_queue - flow.arrival, 0.0)
        m.queue_wait.observe(queue_s)
    ttft = None if flow.first_token is None else flow.first_token - flow.arrival
    if ttft is not None:
        m.ttft.observe(ttft)
    latency = sla_met = None
    end = flow.ended
    if outcome.served and end is not None and flow.task is not None:
        latency = end - flow.arrival
        # A TTFT SLA is met by the first token; a whole answer's first token is its end.
        judged = ttft if flow.task.sla_kind == "ttft" and ttft is not None else latency
        sla_met = judged <= flow.task.sla_s
        m.latency.observe(latency)
        (m.sla_within if sla_met else m.sla_outside).inc()
        admitted = flow.req.admitted_at if flow.req is not None else None
        if admitted is not None and flow.tokens > 0 and end > admitted:
            m.speed.observe(flow.tokens / flow.seqs / (end - admitted))
    if flow.tokens:
        m.tokens.inc(flow.tokens)
    overrun = overran(flow.task, flow.tokens, flow.seqs)
    if overrun:
        m.overruns.inc()
    if flow.key is not None:
        gw.metrics.key_requests.labels(flow.key.name, outcome.value).inc()
    if gw.config.log_requests:
        fields = _fields(flow, outcome, status, error, queue_s, ttft, latency, sla_met)
        fields["key"] = flow.key.name if flow.key is not None else None
        fields["overrun"] = overrun
        log_request(fields)


def _fields(
    flow: Flow,
    outcome: Outcome,
    status: int,
    error: str | None,
    queue_s: float | None,
    ttft: float | None,
    latency: float | None,
    sla_met: bool | None,
) -> dict[str, Any]:
    payload = flow.call.payload if flow.call is not None else None
    req = flow.req
    return {
        "id": flow.id,
        "endpoint": flow.endpoint,
        "task": flow.task_name,
        "task_via": flow.via,
        "outcome": outcome.value,
        "status": status,
        "stream": payload.stream if payload is not None else None,
        "model": payload.model if payload is not None else None,
        "tier": req.tier.value if req is not None else None,
        "queue_ms": _ms(queue_s),
        "ttft_ms": _ms(ttft),
        "latency_ms": _ms(latency),
        "tokens": flow.tokens,
        # Each sequence is expected to make req.tokens: the request, that many times.
        "expected_tokens": req.tokens * req.seqs if req is not None else None,
        "seqs": req.seqs if req is not None else None,
        "sla_s": flow.task.sla_s if flow.task is not None else None,
        "sla_kind": flow.task.sla_kind if flow.task is not None else None,
        "sla_met": sla_met,
        "error": error,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)
