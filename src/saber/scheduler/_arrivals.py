"""How fast requests arrive lately, and of which kinds: what one more running request
would cost the requests still to come."""

from __future__ import annotations

import itertools
from collections import deque

from saber.scheduler._request import SchedRequest

WINDOW_S = 10.0
"""Arrivals over the last this many seconds set the rate. Long enough to hold several
arrivals at the rates a gateway sees, short enough that the end of a burst shows
within a few seconds; it measures the clients, not the engine."""


RECENT = 16
"""The last this many arrivals bound the rate from above."""


class Arrivals:
    """Recent arrivals: their rate, each task's share of them, and the last request of
    each task (what a new one is likely to look like)."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._seen: deque[tuple[float, str, int]] = deque()
        self._counts: dict[str, int] = {}
        self.last: dict[str, SchedRequest] = {}
        self._first: float | None = None

    def observe(self, req: SchedRequest, now: float) -> None:
        if self._first is None:
            self._first = now
        self._seen.append((now, req.task, req.seqs))
        self._counts[req.task] = self._counts.get(req.task, 0) + req.seqs
        self.last[req.task] = req
        self.expire(now)

    def expire(self, now: float) -> None:
        """Forget the arrivals that have left the window (at ``quiet_at``, the last)."""
        seen, counts = self._seen, self._counts
        while seen and seen[0][0] + self.window_s <= now:
            _, task, seqs = seen.popleft()
            counts[task] -= seqs
            if not counts[task]:
                del counts[task]

    def rate(self, now: float) -> float:
        """Sequences per second over the window (or since the first arrival), and no
        more than the last RECENT arrivals show up to now: once arrivals stop, the rate
        falls as fast as it can be told apart from a pause."""
        self.expire(now)
        seen = self._seen
        if self._first is None or not seen:
            return 0.0
        span = min(self.window_s, max(now - self._first, 1.0))
        rate = sum(self._counts.values()) / span
        if len(seen) > RECENT:
            recent = sum(seqs for _, _, seqs in itertools.islice(reversed(seen), RECENT))
            rate = min(rate, recent / max(now - seen[-RECENT][0], 1e-3))
        return rate

    def quiet_at(self) -> float | None:
        """When the last arrival leaves the window, and the rate falls to 0 unless another
        comes: the requests still to come then cost nothing."""
        return self._seen[-1][0] + self.window_s if self._seen else None

    def mix(self, now: float) -> dict[str, float]:
        """Each task's share of the recent arrivals."""
        self.expire(now)
        total = sum(self._counts.values())
        return {task: n / total for task, n in self._counts.items()} if total else {}
