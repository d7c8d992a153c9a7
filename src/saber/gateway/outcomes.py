"""Every way a request leaves the gateway: one metric label, one status, one log line each."""

from __future__ import annotations

from enum import StrEnum

from saber.scheduler import Outcome as SchedOutcome


class Outcome(StrEnum):
    """The scheduler's outcomes, plus the ways out that the scheduler never sees."""

    # The scheduler's own (same values as saber.scheduler.Outcome).
    SERVED = "served"
    SERVED_DEMOTED = "served_demoted"
    CANCELLED_QUEUED = "cancelled_queued"
    CANCELLED_RUNNING = "cancelled_running"
    FAILED = "failed"
    REJECTED_QUEUE_FULL = "rejected_queue_full"
    REJECTED_LPQ_TIMEOUT = "rejected_lpq_timeout"
    # Answered by the gateway before the request reached the scheduler.
    INVALID_REQUEST = "invalid_request"
    UNAUTHORIZED = "unauthorized"
    # Admitted, then the backend did not serve it.
    BACKEND_UNAVAILABLE = "backend_unavailable"  # refused, reset, unreachable
    BACKEND_TIMEOUT = "backend_timeout"  # no answer within the read timeout
    BACKEND_REJECTED = "backend_rejected"  # the backend answered 4xx (passed through)
    BACKEND_ERROR = "backend_error"  # 5xx, or an error in the middle of a stream
    INTERNAL_ERROR = "internal_error"  # a bug in the gateway

    @classmethod
    def from_scheduler(cls, outcome: SchedOutcome) -> Outcome:
        return cls(outcome.value)


STATUS: dict[Outcome, int] = {
    Outcome.SERVED: 200,
    Outcome.SERVED_DEMOTED: 200,
    Outcome.CANCELLED_QUEUED: 499,
    Outcome.CANCELLED_RUNNING: 499,
    Outcome.FAILED: 502,
    Outcome.REJECTED_QUEUE_FULL: 429,
    Outcome.REJECTED_LPQ_TIMEOUT: 503,
    Outcome.INVALID_REQUEST: 400,
    Outcome.UNAUTHORIZED: 401,
    Outcome.BACKEND_UNAVAILABLE: 503,
    Outcome.BACKEND_TIMEOUT: 504,
    Outcome.BACKEND_REJECTED: 400,
    Outcome.BACKEND_ERROR: 502,
    Outcome.INTERNAL_ERROR: 500,
}
"""The HTTP status each outcome answers with (499: the client had gone; for
``backend_rejected`` the backend's own 4xx is passed through)."""
