"""After a request: its metrics and its one log line, from what the exchange recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from saber.gateway.access_log import log_request
from saber.gateway.admission import Ticket
from saber.gateway.outcomes import STATUS, Outcome
from saber.gateway.payload import Call

if TYPE_CHECKING:
    from saber.gateway.state import Gateway


@dataclass(slots=True)
class Record:
    """What happened to one request. Times are ``time.perf_counter()`` seconds."""

    offered: float = 0.0  # handed to the scheduler
    left_queue: float | None = None  # admitted, or turned away after waiting
    first_token: float | None = None  # first generated text relayed (streams)
    upstream_done: float | None = None  # the backend's answer fully read
    end: float | None = None  # the last byte handed to the client
    tokens: int = 0  # generated, from the backend's usage or counted
    status: int | None = None  # the HTTP status the client got
    error: str | None = None


def account(gw: Gateway, call: Call, ticket: Ticket, outcome: Outcome, rec: Record) -> None:
    """Count the request in the metrics and write its log line. Called once."""
    m = gw.metrics.task(call.task.name)
    m.outcomes[outcome].inc()
    admitted = rec.left_queue if ticket.admitted_at is not None else None
    queue_s = (
        rec.left_queue if rec.left_queue is not None else rec.end or rec.offered
    ) - rec.offered
    if outcome is not Outcome.REJECTED_QUEUE_FULL:
        m.queue_wait.observe(max(queue_s, 0.0))
    if rec.first_token is not None:
        m.ttft.observe(rec.first_token - call.received)
    latency = sla_met = None
    if outcome in (Outcome.SERVED, Outcome.SERVED_DEMOTED) and rec.end is not None:
        latency = rec.end - call.received
        sla_met = latency <= call.task.sla_s
        m.latency.observe(latency)
        (m.sla_within if sla_met else m.sla_outside).inc()
        done = rec.upstream_done or rec.end
        if admitted is not None and rec.tokens > 0 and done > admitted:
            m.speed.observe(rec.tokens / (done - admitted))
    if rec.tokens:
        m.tokens.inc(rec.tokens)
    if gw.config.log_requests:
        log_request(_fields(call, ticket, outcome, rec, queue_s, latency, sla_met))


def _fields(
    call: Call,
    ticket: Ticket,
    outcome: Outcome,
    rec: Record,
    queue_s: float,
    latency: float | None,
    sla_met: bool | None,
) -> dict[str, Any]:
    ttft = None if rec.first_token is None else rec.first_token - call.received
    return {
        "id": ticket.id,
        "endpoint": call.endpoint,
        "task": call.task.name,
        "task_via": call.via,
        "outcome": outcome.value,
        "status": rec.status if rec.status is not None else STATUS[outcome],
        "stream": call.payload.stream,
        "model": call.payload.model,
        "tier": ticket.tier.value,
        "queue_ms": _ms(queue_s),
        "ttft_ms": _ms(ttft),
        "latency_ms": _ms(latency),
        "tokens": rec.tokens,
        "expected_tokens": ticket.req.tokens,
        "sla_s": call.task.sla_s,
        "sla_met": sla_met,
        "error": rec.error,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)
