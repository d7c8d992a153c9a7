"""The HTTP status each outcome answers with (``saber.scheduler.Outcome`` names them)."""

from __future__ import annotations

from saber.scheduler import Outcome

STATUS: dict[Outcome, int] = {
    Outcome.SERVED: 200,
    Outcome.SERVED_DEMOTED: 200,
    Outcome.CANCELLED_QUEUED: 499,
    Outcome.CANCELLED_RUNNING: 499,
    Outcome.REJECTED_QUEUE_FULL: 429,
    Outcome.REJECTED_EXPIRED: 503,
    Outcome.INVALID_REQUEST: 400,
    Outcome.UNAUTHORIZED: 401,
    Outcome.FORBIDDEN: 403,
    Outcome.CANCELLED_UPLOAD: 499,
    Outcome.UPLOAD_TIMEOUT: 408,
    Outcome.REJECTED_DRAINING: 503,
    Outcome.DRAIN_TIMEOUT: 503,
    Outcome.BACKEND_UNAVAILABLE: 503,
    Outcome.BACKEND_TIMEOUT: 504,
    Outcome.BACKEND_REJECTED: 400,
    Outcome.BACKEND_ERROR: 502,
    Outcome.INTERNAL_ERROR: 500,
}
"""499: the client had gone; for ``backend_rejected`` the backend's own 4xx is passed
through; ``drain_timeout`` on a stream already begun ends it with an error event."""
