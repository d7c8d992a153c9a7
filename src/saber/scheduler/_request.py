from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum


class Tier(StrEnum):
    HIGH = "high"
    LOW = "low"


class Action(StrEnum):
    """What a decision does to a request."""

    ADMIT = "admit"  # send it to the backend now
    DEMOTE = "demote"  # moved from the HPQ to the LPQ: it can no longer meet its SLA
    REJECT = "reject"  # it leaves without service (see Decision.outcome)


class Outcome(StrEnum):
    """Every way a request can leave the scheduler. One metric label each."""

    SERVED = "served"  # admitted from the HPQ and finished
    SERVED_DEMOTED = "served_demoted"  # demoted, then served best effort from the LPQ
    CANCELLED_QUEUED = "cancelled_queued"  # the client went away while it waited
    CANCELLED_RUNNING = "cancelled_running"  # the client went away while it ran
    FAILED = "failed"  # the backend failed it while it ran
    REJECTED_QUEUE_FULL = "rejected_queue_full"  # its task's queue was full on arrival
    REJECTED_LPQ_TIMEOUT = "rejected_lpq_timeout"  # waited in the LPQ past the limit


@dataclass(slots=True, eq=False)
class SchedRequest:
    """A request as the scheduler sees it: a deadline and a number of tokens.

    ``tokens`` is the output the request is expected to generate; the caller
    decides it (the true length in the paper's oracle set-up, an estimate in
    the gateway).
    """

    id: str
    task: str
    arrival: float
    deadline: float
    tokens: int
    tier: Tier = Tier.HIGH
    admitted_at: float | None = None
    demoted_at: float | None = None
    # The speed it needed when admitted; running requests are protected against it.
    required_speed: float | None = None
    outcome: Outcome | None = field(default=None)

    def required_speed_at(self, now: float) -> float:
        """Tokens per second it needs from ``now`` on to finish by its deadline."""
        remaining = self.deadline - now
        if remaining <= 0:
            return math.inf
        return self.tokens / remaining


@dataclass(slots=True, frozen=True)
class Decision:
    action: Action
    request: SchedRequest
    at: float
    tier: Tier = Tier.HIGH  # the queue it was taken from (ADMIT) or put in (DEMOTE)
    outcome: Outcome | None = None  # set on REJECT
