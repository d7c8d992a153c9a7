"""What a pool shares out between its backends besides requests: sessions kept on one
backend (rendezvous hashing) and, behind several gateways, the budgets and headroom
each keeps for the others' admissions."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class Affinity:
    """How often a session's request was placed on its own backend (kept), or went
    elsewhere because another was worth more than the margin (broken)."""

    kept: int = 0
    broken: int = 0


def rendezvous(key: str, names: Sequence[str]) -> int:
    """The position in ``names`` of the backend with the highest weight for ``key``
    (rendezvous hashing): the same for the same key and backends, whatever their order,
    and when a backend leaves, only its own keys move. A stable hash, not Python's
    salted ``hash``."""
    if not names:
        raise ValueError("rendezvous over no backends")
    return max(range(len(names)), key=lambda i: (_weight(key, names[i]), names[i]))


def _weight(key: str, backend: str) -> int:
    digest = hashlib.blake2b(f"{backend}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def budget_of(headroom: int, gateways: int) -> int:
    """What each of ``gateways`` may admit at one backend per scrape interval so that
    the others' admissions since any one's last scrape stay within a fixed
    ``headroom``: ``headroom // (gateways - 1)``, at least 1 (so below gateways - 1 the
    bound is gateways - 1, not the headroom)."""
    if gateways < 2 or headroom < 0:
        raise ValueError(f"a budget needs gateways {gateways} >= 2 and headroom {headroom} >= 0")
    return max(headroom // (gateways - 1), 1)


def derived_headroom(gateways: int, admitted: float) -> int:
    """What a gateway adds, at one replica, for what the other gateways admit there
    between two of its scrapes: ``ceil((gateways - 1) * admitted)``, ``admitted`` being
    how many it admitted there itself over its last scrape interval.

    The balancer splits clients evenly over the gateways, so each other gateway is
    assumed to admit about as much as this one did; what they admitted before the scrape
    is already in the scraped count, what they admit until the next one is not.
    """
    if gateways < 1 or admitted < 0:
        raise ValueError(f"gateways {gateways} must be >= 1 and admitted {admitted} >= 0")
    return math.ceil((gateways - 1) * admitted)
