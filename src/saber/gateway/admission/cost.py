"""What a request costs the engine, as the scheduler is told it.

A request runs ``n`` (or ``best_of``, when larger) sequences for each of its
prompts, each in a batch slot of its own and each making its own answer
(``saber.wire.sequences``). The scheduler counts them all: in the load L that
f(L) sees, against ``max_concurrency``, and in the tokens it expects. One request
may run at most ``max_sequences_per_request`` (by default ``max_concurrency``, as
more could never run); a larger one is a 400.

A request with ``ignore_eos`` and a cap, and nothing else that could stop it
(``stop``, ``stop_token_ids``), generates exactly the cap: the scheduler is told
its length (exact, the cap its floor) rather than the task's expected one. The
body that goes upstream is not changed for it.
"""

from __future__ import annotations

from saber import wire
from saber.config import Slo, TaskType
from saber.gateway.edge.payload import Payload
from saber.gateway.errors import invalid
from saber.scheduler import SchedRequest, TaskLengths, request_for


def check_sequences(seqs: wire.Sequences, limit: int | None) -> None:
    """A 400 for a request that runs more than ``limit`` sequences (None: no limit)."""
    if limit is None or seqs.total <= limit:
        return
    raise invalid(
        f"this request runs {seqs.total} sequences ({seqs}); the most one request may run "
        f"is {limit} (max_sequences_per_request)",
        param="prompt" if seqs.prompts > 1 else seqs.field,
        code="too_many_sequences",
    )


def scheduler_request(
    task: TaskType,
    payload: Payload,
    cap: int | None,
    *,
    id: str,
    arrival: float,
    lengths: TaskLengths,
    affinity: str | None = None,
    slo: Slo | None = None,
    prompt_tokens: int | None = None,
) -> SchedRequest:
    """The request as the scheduler sees it: its sequences, each bounded by the client's
    ``max_tokens`` (lowered to ``cap``, the task honesty cap) and raised to its
    ``min_tokens``; exactly its cap when its length is forced; its session's key
    (``affinity``), if any; its prompt's size and fingerprint (``edge.prompt``), which
    its expected length and its prefill may follow (``prompt_tokens``: the backend's
    exact count, where it was asked); its own SLO (``edge.slo``), each part replacing
    its task's. ValueError for a token count no engine serves."""
    max_tokens = payload.max_tokens
    if cap is not None:
        max_tokens = cap if max_tokens is None else min(cap, max_tokens)
    min_tokens = payload.min_tokens if max_tokens is None else min(payload.min_tokens, max_tokens)
    exact = payload.forced_length and max_tokens is not None
    return request_for(
        task,
        lengths=lengths,
        id=id,
        arrival=arrival,
        max_tokens=max_tokens,
        min_tokens=max_tokens if exact and max_tokens is not None else min_tokens,
        tokens=max_tokens if exact else None,
        seqs=payload.seqs.total,
        affinity=affinity,
        prompt_bytes=payload.prompt.nbytes or None,
        prompt_tokens=prompt_tokens if prompt_tokens is not None else payload.prompt.tokens,
        fingerprint=payload.prompt.fingerprint,
        slo=slo,
    )
