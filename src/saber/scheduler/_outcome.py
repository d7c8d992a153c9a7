"""Every way a request can leave: one name each, shared by the scheduler, the gateway
and the simulator. The HTTP status of each is the gateway's business."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """How a request left. One metric label, one status and one log line each."""

    # Decided by the scheduler.
    SERVED = "served"  # admitted from the HPQ and finished
    SERVED_DEMOTED = "served_demoted"  # demoted, then served best effort from the LPQ
    CANCELLED_QUEUED = "cancelled_queued"  # the client went away while it waited
    CANCELLED_RUNNING = "cancelled_running"  # the client went away while it ran
    REJECTED_QUEUE_FULL = "rejected_queue_full"  # its task's queue was full on arrival
    REJECTED_EXPIRED = "rejected_expired"  # could no longer finish while still wanted
    # Answered by the gateway before the request reached the scheduler.
    INVALID_REQUEST = "invalid_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"  # a valid key that may not use the task type it asked for
    CANCELLED_UPLOAD = "cancelled_upload"  # the client went away before its body arrived
    UPLOAD_TIMEOUT = "upload_timeout"  # the body did not arrive within its time
    # The gateway is shutting down (SIGTERM).
    REJECTED_DRAINING = "rejected_draining"  # arrived or still queued while it drained
    DRAIN_TIMEOUT = "drain_timeout"  # still running when the drain's time ran out
    # Admitted, then the backend did not serve it.
    BACKEND_UNAVAILABLE = "backend_unavailable"  # refused, reset, unreachable, or its 503
    BACKEND_TIMEOUT = "backend_timeout"  # no answer within the read timeout
    BACKEND_REJECTED = "backend_rejected"  # the backend answered 4xx (passed through)
    BACKEND_ERROR = "backend_error"  # 5xx, or an error in the middle of a stream
    INTERNAL_ERROR = "internal_error"  # a bug in the gateway

    @property
    def served(self) -> bool:
        return self in (Outcome.SERVED, Outcome.SERVED_DEMOTED)
