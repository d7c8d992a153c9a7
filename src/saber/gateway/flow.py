"""One completion request, owned from the moment the route accepts it to its one finish.

The route stamps its arrival (on the admission clock, the scheduler's) and fills
in what it learns: the task type, the checked call, the scheduler request. The
exchange offers it, waits, relays it, and hands ``finalize`` the outcome the relay
decided. ``finalize`` runs once: it takes the request out of the scheduler
according to where the scheduler holds it (running: finished if served, else
cancelled; queued: cancelled; let go by a REJECT: nothing), then counts it in
the metrics and writes its one log line (``accounting``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from saber.config import TaskType
from saber.gateway.access_log import GATEWAY_LOGGER
from saber.gateway.accounting import account
from saber.gateway.outcomes import STATUS
from saber.gateway.payload import Call
from saber.gateway.tasks import Endpoint, Via
from saber.scheduler import Decision, Outcome, SchedRequest

if TYPE_CHECKING:
    from saber.gateway.access import Key
    from saber.gateway.state import Gateway

log = logging.getLogger(GATEWAY_LOGGER)

CANCELLED = (Outcome.CANCELLED_QUEUED, Outcome.CANCELLED_RUNNING)


class Flow:
    """One request's state, and its exactly-once ``finalize``."""

    def __init__(self, gw: Gateway, endpoint: Endpoint) -> None:
        self.gw = gw
        self.clock = gw.admission.now
        self.arrival = self.clock()  # the one arrival stamp: deadline, wait, TTFT, latency
        self.id = gw.admission.new_id()
        self.endpoint = endpoint
        self.key: Key | None = None  # the client's API key, when keys are configured
        self.task: TaskType | None = None
        self.via: Via | None = None
        self.call: Call | None = None
        self.req: SchedRequest | None = None  # once offered: its tier, admission, outcome
        self.left_queue: float | None = None  # admitted, rejected, or cancelled while queued
        self.first_token: float | None = None
        self.tokens = 0  # generated so far, as the relay counted them
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
        return self.gw.admission.offer(self.req)

    def decided(self, decision: Decision) -> None:
        """The scheduler admitted or rejected it: it left the queue."""
        self.left_queue = decision.at

    def progress(self, tokens: int) -> None:
        """The relay's running count of generated tokens, each time it changes."""
        if tokens and self.first_token is None:
            self.first_token = self.clock()
        self.tokens = tokens
        if self.req is not None:
            self.gw.admission.progress(self.req, tokens)

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
            account(self, outcome, status or STATUS[outcome], error, fault)
        except Exception:
            log.exception("accounting for a request failed", extra={"id": self.id})
        return outcome

    def _leave_scheduler(self, outcome: Outcome) -> Outcome:
        assert self.req is not None
        admission = self.gw.admission
        try:
            left = admission.leave(self.req, served=outcome.served, tokens=self.tokens)
        except Exception:
            log.exception("the scheduler failed to let a request go", extra={"id": self.id})
            admission.drop(self.req)
            return Outcome.INTERNAL_ERROR
        if left is Outcome.CANCELLED_QUEUED:
            self.left_queue = self.ended
        if left is None:  # a REJECT had let it go; a cancellation before any decision
            return outcome
        return left if outcome.served or outcome in CANCELLED else outcome
