"""A request as the scheduler sees it, what is decided of it, and every way it can
leave (``Outcome``: one name each, shared by the scheduler, the gateway and the
simulator; the HTTP status of each is the gateway's business)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from saber.config import Slo, TaskType
from saber.scheduler.lengths._conditioned import NOTHING, Carried
from saber.scheduler.lengths._task_lengths import Dist, TaskLengths


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


class Tier(StrEnum):
    HIGH = "high"
    LOW = "low"

    @property
    def engine_priority(self) -> int:
        """vLLM's request priority for work admitted from this tier (lower is served
        first): demoted work ranks below work that can still be on time."""
        return 0 if self is Tier.HIGH else 1


class Action(StrEnum):
    """What a decision does to a request."""

    ADMIT = "admit"  # send it to the backend now
    DEMOTE = "demote"  # moved from the HPQ to the LPQ: it can no longer meet its SLA
    REJECT = "reject"  # it leaves without service (see Decision.outcome)


# What a request's chance of finishing in time depends on besides time and speed:
# (task, tokens, cap, floor, exact, the distribution its length follows, its prefill,
# its SLO's shape: deadline - arrival, first-token deadline - deadline, pace floor).
Kind = tuple[str, int, int | None, int, bool, Dist, float, tuple[float, float, float]]


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
    cap: int | None = None  # the client's max_tokens: the most it can generate
    floor: int = 0  # the client's min_tokens: the least it generates
    # ``tokens`` is the true length (the paper's oracle set-up, or a client that forces
    # it with ignore_eos), not an estimate from the task's lengths.
    exact: bool = False
    # Sequences it runs at the backend: n (or best_of) completions for each prompt of a
    # list. Each occupies a slot and makes its own ``tokens``.
    seqs: int = 1
    # "ttft": the deadline is for the first token, not the last (its SLO's primary part).
    sla_kind: str = "e2e"
    # Its SLO's other parts: its first token by ``first_by`` (a TTFT limit beside an e2e
    # one; inf: none), and each token after the first at ``pace`` tokens/s at least
    # (1 / its TPOT limit; 0: none).
    first_by: float = math.inf
    pace: float = 0.0
    tier: Tier = Tier.HIGH
    admitted_at: float | None = None
    demoted_at: float | None = None
    # The speed it needed when admitted; running requests are protected against it.
    required_speed: float | None = None
    # Tokens generated so far, as the relay last reported (None: never reported).
    generated: int | None = None
    first_token_at: float | None = None  # when a report first counted a token
    outcome: Outcome | None = field(default=None)
    # A stable key of the client's session (a digest, never a secret): a pool with
    # affinity keeps its requests on one backend while that costs little (``Pool``).
    affinity: str | None = None
    # What it carries that its answer's length may follow (its prompt's size, a
    # fingerprint), and the distribution its length follows given that (None: its task's).
    carried: Carried = NOTHING
    dist: Dist = None
    # Seconds its prompt's prefill takes beyond what f(L) counts for a request of its
    # length (``Scheduler``, from the profile's prefill): its decoding must be done by
    # ``due``, that much before its deadline.
    prefill_s: float = 0.0

    @property
    def kind(self) -> Kind:
        """What its chance of finishing in time depends on, besides time and speed:
        requests of one kind share their length distribution."""
        return (
            self.task,
            self.tokens,
            self.cap,
            self.floor,
            self.exact,
            self.dist,
            self.prefill_s,
            (self.deadline - self.arrival, self.first_by - self.deadline, self.pace),
        )

    @property
    def due(self) -> float:
        """When its answer must be made by, at the speed f(L) predicts: its deadline,
        less its prefill beyond what f(L) counts."""
        return self.deadline - self.prefill_s

    def required_speed_at(self, now: float) -> float:
        """Tokens per second it needs from ``now`` on to finish by its deadline (0 for a
        TTFT deadline, which a speed does not decide)."""
        remaining = self.due - now
        if remaining <= 0:
            return math.inf
        return self.tokens / remaining if self.sla_kind == "e2e" else 0.0


@dataclass(slots=True, frozen=True)
class Decision:
    action: Action
    request: SchedRequest
    at: float
    tier: Tier = Tier.HIGH  # the queue it was taken from (ADMIT) or put in (DEMOTE)
    outcome: Outcome | None = None  # set on REJECT


MAX_TOKENS = 1 << 24
"""More output than any engine serves in one request: a larger count is a caller's error."""


def request_for(
    task: TaskType,
    *,
    id: str,
    arrival: float,
    max_tokens: int | None = None,
    min_tokens: int = 0,
    tokens: int | None = None,
    lengths: TaskLengths | None = None,
    seqs: int = 1,
    affinity: str | None = None,
    prompt_bytes: int | None = None,
    prompt_tokens: int | None = None,
    fingerprint: str | None = None,
    slo: Slo | None = None,
) -> SchedRequest:
    """The one way a request becomes scheduler input, in the gateway and the simulator
    alike; they pass the scheduler's ``lengths``, which it learns.

    Its SLO is its task's, each part ``slo`` states replacing the task's (a request's
    own limits, already checked against the task's bounds): its deadline is ``arrival``
    plus its e2e limit, else its TTFT limit (``sla_kind`` "ttft"), else none; a TTFT
    limit beside an e2e one is ``first_by``, a TPOT limit its ``pace``. ``tokens`` is
    what the request
    will generate when the caller knows it (the paper's oracle set-up); otherwise the
    expected length of the task's answers (``lengths``, else the configured one),
    bounded by the client's ``max_tokens`` and raised to its ``min_tokens`` (vLLM
    generates at least that many). ``seqs`` is how many sequences it runs (n times
    the prompts of a list); ``affinity`` is its session's key, if any. What the
    request carries (its prompt's size in bytes, or in tokens where known, and a
    ``fingerprint`` of what it shares with others) may condition its expected length
    (``TaskLengths.pick``). Values no engine could serve raise ValueError before
    anything is built.
    """
    if not math.isfinite(arrival):
        raise ValueError(f"arrival must be a finite time, got {arrival!r}")
    for name, value in (("max_tokens", max_tokens), ("min_tokens", min_tokens), ("tokens", tokens)):
        if value is not None and not 0 <= value <= MAX_TOKENS:
            raise ValueError(f"{name} must be within 0..{MAX_TOKENS}, got {value}")
    if seqs < 1:
        raise ValueError(f"seqs must be >= 1, got {seqs}")
    exact = tokens is not None
    lengths = lengths or _CONFIGURED
    carried = lengths.carry(
        prompt_bytes=prompt_bytes, prompt_tokens=prompt_tokens, fingerprint=fingerprint
    )
    dist = None if exact else lengths.pick(task.name, carried)
    if tokens is None:
        tokens = lengths.expected(task, max_tokens, min_tokens, dist)
    deadline, sla_kind, first_by, pace = _slo_times(task, slo, arrival)
    return SchedRequest(
        id=id,
        task=task.name,
        arrival=arrival,
        deadline=deadline,
        tokens=max(tokens, 1),
        cap=max_tokens if max_tokens else None,
        floor=min_tokens,
        exact=exact,
        seqs=seqs,
        sla_kind=sla_kind,
        first_by=first_by,
        pace=pace,
        affinity=affinity,
        carried=carried,
        dist=dist,
    )


def _slo_times(
    task: TaskType, override: Slo | None, arrival: float
) -> tuple[float, str, float, float]:
    """(deadline, its kind, first-token deadline, pace floor) of a request of ``task``."""
    if override is None or not override.parts:
        slo = task.slo
        if math.isinf(task.sla_s):  # only a pace: no deadline
            return math.inf, "e2e", math.inf, 1.0 / slo.tpot_s if slo.tpot_s else 0.0
        deadline, kind = arrival + task.sla_s, task.sla_kind
    else:
        slo = task.slo.merged(override)
        if slo.e2e_s is not None:
            deadline, kind = arrival + slo.e2e_s, "e2e"
        elif slo.ttft_s is not None:
            deadline, kind = arrival + slo.ttft_s, "ttft"
        else:
            deadline, kind = math.inf, "e2e"
    first_by = arrival + slo.ttft_s if kind == "e2e" and slo.ttft_s is not None else math.inf
    pace = 1.0 / slo.tpot_s if slo.tpot_s is not None else 0.0
    return deadline, kind, first_by, pace


_CONFIGURED = TaskLengths()
