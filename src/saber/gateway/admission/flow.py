"""One completion request, owned from the moment the route accepts it to its one finish.

The route stamps its arrival (on the admission clock, the scheduler's) and fills
in what it learns: the task type, the checked call, the scheduler request. The
exchange offers it, waits, relays it, and hands ``finalize`` the outcome the relay
decided. ``finalize`` runs once: it takes the request out of the scheduler
according to where the scheduler holds it (running: finished if served, else
cancelled; queued: cancelled; let go by a REJECT: nothing), then counts it in
the metrics and writes its one log line (``_account``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from saber.config import Part, Slo, TaskType
from saber.gateway.admission.driver import Admission
from saber.gateway.edge.access import Key
from saber.gateway.edge.honesty import overran
from saber.gateway.edge.payload import Call
from saber.gateway.edge.tasks import Endpoint, Via
from saber.gateway.errors import STATUS
from saber.gateway.observe.logs import GATEWAY_LOGGER, log_request
from saber.gateway.observe.metrics import GatewayMetrics
from saber.scheduler import Decision, Outcome, SchedRequest

log = logging.getLogger(GATEWAY_LOGGER)

CANCELLED = (Outcome.CANCELLED_QUEUED, Outcome.CANCELLED_RUNNING)


class Flow:
    """One request's state, and its exactly-once ``finalize``."""

    def __init__(
        self,
        admission: Admission,
        metrics: GatewayMetrics,
        endpoint: Endpoint,
        *,
        log_requests: Callable[[], bool],
    ) -> None:
        self.admission = admission
        self.metrics = metrics
        self.log_requests = log_requests  # read at its finish: a reload may change it
        self.clock = admission.now
        self.arrival = self.clock()  # the one arrival stamp: deadline, wait, TTFT, latency
        self.id = admission.new_id()
        self.endpoint = endpoint
        self.key: Key | None = None  # the client's API key, when keys are configured
        self.task: TaskType | None = None
        self.slo: Slo | None = None  # its own limits (headers), each replacing its task's
        self.via: Via | None = None
        self.call: Call | None = None
        self.req: SchedRequest | None = None  # once offered: its tier, admission, outcome
        self.backend: str | None = None  # the backend's name, once admitted there
        self.default_model: str | None = None  # the served model, where the client named none
        self.left_queue: float | None = None  # admitted, rejected, or cancelled while queued
        self.first_token: float | None = None
        self.tokens = 0  # generated so far, as the relay counted them
        self.prompt_tokens: int | None = None  # the engine's count of its prompt (usage)
        self.ended: float | None = None
        self.outcome: Outcome | None = None  # set once, by finalize

    @property
    def task_name(self) -> str:
        return self.task.name if self.task is not None else "unknown"

    @property
    def seqs(self) -> int:
        """Sequences it runs at the backend (1 until its scheduler request is built)."""
        return self.req.seqs if self.req is not None else 1

    # -- on its way -------------------------------------------------------------------

    def offer(self) -> asyncio.Future[Decision]:
        """Hand the request to the scheduler; the future resolves with its ADMIT or REJECT."""
        assert self.req is not None
        return self.admission.offer(self.req)

    def decided(self, decision: Decision) -> None:
        """The scheduler admitted or rejected it: it left the queue."""
        self.left_queue = decision.at

    def progress(self, tokens: int) -> None:
        """The relay's running count of generated tokens, each time it changes."""
        if tokens and self.first_token is None:
            self.first_token = self.clock()
        self.tokens = tokens
        if self.req is not None:
            self.admission.progress(self.req, tokens)

    def queue_s(self) -> float:
        """Seconds from arrival to leaving the queue (or to now, while it waits)."""
        return (self.left_queue if self.left_queue is not None else self.clock()) - self.arrival

    # -- the end ----------------------------------------------------------------------

    def finalize(
        self,
        outcome: Outcome,
        *,
        status: int | None = None,
        committed: bool = False,
        tokens: int | None = None,
        error: str | None = None,
        fault: str | None = None,
    ) -> Outcome:
        """End the request with ``outcome``, once; later calls change nothing and
        return the first one's outcome.

        A cancellation (``cancelled_queued`` or ``cancelled_running``: the client went
        away) is named by where the scheduler held the request. ``status`` is what
        the client gets (the outcome's by default); ``committed`` says that it is
        a stream's, already sent. ``tokens`` is the final count (the relay's count
        so far by default), ``error`` a message for the log, ``fault`` the
        ``saber_backend_errors_total`` kind to count. If the scheduler fails to let
        the request go, its place is freed all the same and it ends as
        ``internal_error``: the returned outcome is then not the one given.
        """
        if self.outcome is not None:
            return self.outcome
        self.outcome = outcome
        self.ended = self.clock()
        if tokens is not None:
            self.tokens = tokens
        if self.req is not None:
            final = self._leave_scheduler(outcome)
            if final is Outcome.INTERNAL_ERROR and outcome is not final:
                error = "internal error: the scheduler failed to let the request go"
                if not committed:
                    status = None
            self.outcome = outcome = final
        try:
            _account(self, outcome, status or STATUS[outcome], error, fault)
        except Exception:
            log.exception("accounting for a request failed", extra={"id": self.id})
        return outcome

    def _leave_scheduler(self, outcome: Outcome) -> Outcome:
        assert self.req is not None
        admission = self.admission
        try:
            left = admission.leave(
                self.req, served=outcome.served, tokens=self.tokens, prompt=self.prompt_tokens
            )
        except Exception:
            log.exception("the scheduler failed to let a request go", extra={"id": self.id})
            admission.drop(self.req)
            return Outcome.INTERNAL_ERROR
        if left is Outcome.CANCELLED_QUEUED:
            self.left_queue = self.ended
        if left is None:  # a REJECT had let it go; a cancellation before any decision
            return outcome
        return left if outcome.served or outcome in CANCELLED else outcome


def _account(
    flow: Flow, outcome: Outcome, status: int, error: str | None, fault: str | None
) -> None:
    """Count the request in the metrics and write its log line.

    Every time is on the admission clock and measured from the request's one arrival
    stamp: the queue wait to when it left the queue, TTFT to its first generated
    token, the latency (and so the SLA verdict) to when it was finalized, which for a
    served request is when the backend's answer was complete."""
    metrics = flow.metrics
    m = metrics.task(flow.task_name)
    m.outcomes[outcome].inc()
    if fault is not None:
        metrics.backend_error(fault, flow.backend)
    queue_s = None
    if flow.left_queue is not None and outcome is not Outcome.REJECTED_QUEUE_FULL:
        queue_s = max(flow.left_queue - flow.arrival, 0.0)
        m.queue_wait.observe(queue_s)
    ttft = None if flow.first_token is None else flow.first_token - flow.arrival
    if ttft is not None:
        m.ttft.observe(ttft)
    latency = sla_met = None
    parts: dict[Part, bool] = {}
    end = flow.ended
    if outcome.served and end is not None and flow.task is not None:
        latency = end - flow.arrival
        # Every part stated, as vLLM counts goodput; a whole answer's first token is its
        # end (and so its tokens after the first take no time).
        slo = flow.task.slo if flow.slo is None else flow.task.slo.merged(flow.slo)
        parts = slo.met(
            ttft=ttft if ttft is not None else latency,
            e2e=latency,
            output_tokens=-(-flow.tokens // flow.seqs),
        )
        sla_met = all(parts.values())
        m.latency.observe(latency)
        (m.sla_within if sla_met else m.sla_outside).inc()
        for part, met in parts.items():
            m.slo_parts[(part, met)].inc()
        admitted = flow.req.admitted_at if flow.req is not None else None
        if admitted is not None and flow.tokens > 0 and end > admitted:
            m.speed.observe(flow.tokens / flow.seqs / (end - admitted))
    if flow.tokens:
        m.tokens.inc(flow.tokens)
    overrun = overran(flow.task, flow.tokens, flow.seqs)
    if overrun:
        m.overruns.inc()
    if flow.key is not None:
        metrics.key_requests.labels(flow.key.name, outcome.value).inc()
    if flow.log_requests():
        fields = _fields(flow, outcome, status, error, queue_s, ttft, latency, sla_met)
        fields["slo_met"] = parts or None
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
        "backend": flow.backend,
        "queue_ms": _ms(queue_s),
        "ttft_ms": _ms(ttft),
        "latency_ms": _ms(latency),
        "tokens": flow.tokens,
        # Its prompt: as the scheduler took it at arrival (from its bytes, or counted),
        # and as the engine counted it (usage).
        "prompt_tokens_at_arrival": (
            None
            if req is None or req.carried.prompt_tokens is None
            else round(req.carried.prompt_tokens, 1)
        ),
        "prompt_tokens": flow.prompt_tokens,
        # Each sequence is expected to make req.tokens: the request, that many times.
        "expected_tokens": req.tokens * req.seqs if req is not None else None,
        "seqs": req.seqs if req is not None else None,
        "sla_s": flow.task.sla_s if flow.task is not None else None,
        "sla_kind": flow.task.sla_kind if flow.task is not None else None,
        "slo": None if flow.slo is None else flow.slo.describe(),
        "sla_met": sla_met,
        "error": error,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)
