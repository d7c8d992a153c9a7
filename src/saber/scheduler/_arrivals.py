"""How fast requests arrive lately, of which kinds, and for how long they have been
coming: what one more running request would cost the requests still to come."""

from __future__ import annotations

import itertools
from collections import deque
from typing import Generic, TypeVar

from saber.scheduler._request import SchedRequest

WINDOW_S = 10.0
"""Arrivals over the last this many seconds set the rate. Long enough to hold several
arrivals at the rates a gateway sees, short enough that the end of a burst shows
within a few seconds; it measures the clients, not the engine."""


RECENT = 16
"""The last this many arrivals bound the rate from above."""

SHORTEST_S = 0.05
"""The shortest span a rate is taken over: a guard against dividing by nothing at a
run's first arrival. The arrivals still to come are then the rate over it times the
time they are taken to go on (about as long again: ``saber.scheduler._costs``), about
one whatever its value, so its value barely matters, on any engine."""


K = TypeVar("K")


class Window(Generic[K]):
    """Counts per key over the last ``window_s`` seconds: what ``Arrivals`` keeps per
    task and ``Shares`` per backend."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.seen: deque[tuple[float, K, int]] = deque()  # (when, key, count), oldest first
        self.counts: dict[K, int] = {}
        self.version = 0  # moves with every count that comes or goes

    def add(self, key: K, count: int, now: float) -> None:
        self.expire(now)
        self.version += 1
        self.seen.append((now, key, count))
        self.counts[key] = self.counts.get(key, 0) + count

    def expire(self, now: float) -> None:
        seen, counts = self.seen, self.counts
        while seen and seen[0][0] + self.window_s <= now:
            self.version += 1
            _, key, count = seen.popleft()
            counts[key] -= count
            if not counts[key]:
                del counts[key]

    def total(self) -> int:
        return sum(self.counts.values())


class Arrivals:
    """Recent arrivals: their rate, each task's share of them, and the last request of
    each task (what a new one is likely to look like)."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self._window = Window[str](window_s)  # sequences per task
        self.last: dict[str, SchedRequest] = {}
        self._since = 0.0  # when the current run of arrivals began

    @property
    def window_s(self) -> float:
        return self._window.window_s

    @property
    def version(self) -> int:
        """Moves with every arrival that comes into the window or leaves it."""
        return self._window.version

    def observe(self, req: SchedRequest, now: float) -> None:
        self.expire(now)
        if not self._window.seen:  # the first arrival since the window last emptied
            self._since = now
        self._window.add(req.task, req.seqs, now)
        self.last[req.task] = req

    def expire(self, now: float) -> None:
        """Forget the arrivals that have left the window (at ``quiet_at``, the last)."""
        self._window.expire(now)

    def age(self, now: float) -> float:
        """How long the current run of arrivals has lasted: since the first arrival
        after the window last emptied. Arrivals that have lasted a seconds are taken to
        last as long again on average, x more with chance exp(-x / a)
        (``saber.scheduler._costs``): a burst is likely to end soon, a stream that has
        run all day is not."""
        return max(now - self._since, SHORTEST_S)

    def rate(self, now: float) -> float:
        """Sequences per second over the current run of arrivals (at most the window),
        and no more than the last RECENT arrivals show up to now: once arrivals stop,
        the rate falls as fast as it can be told apart from a pause."""
        self.expire(now)
        seen = self._window.seen
        if not seen:
            return 0.0
        rate = self._window.total() / min(self.window_s, self.age(now))
        if len(seen) > RECENT:
            recent = sum(seqs for _, _, seqs in itertools.islice(reversed(seen), RECENT))
            rate = min(rate, recent / max(now - seen[-RECENT][0], 1e-3))
        return rate

    def quiet_at(self) -> float | None:
        """When the last arrival leaves the window, and the rate falls to 0 unless another
        comes: the requests still to come then cost nothing."""
        seen = self._window.seen
        return seen[-1][0] + self.window_s if seen else None

    def mix(self, now: float) -> dict[str, float]:
        """Each task's share of the recent arrivals."""
        self.expire(now)
        total = self._window.total()
        return {task: n / total for task, n in self._window.counts.items()} if total else {}


class Shares:
    """Each backend's share of a pool's recent starts, in sequences over the window: of
    the requests still to come for the pool, the share that will run at each backend
    (where the sequence one more request adds slows them)."""

    def __init__(self, backends: int, window_s: float = WINDOW_S) -> None:
        self.backends = backends
        self._window = Window[int](window_s)  # sequences started per backend

    def observe(self, backend: int, seqs: int, now: float) -> None:
        self._window.add(backend, seqs, now)

    def expire(self, now: float) -> None:
        self._window.expire(now)

    def shares(self) -> list[float]:
        """Each backend's share (an even split while nothing has started lately)."""
        total, counts = self._window.total(), self._window.counts
        if not total:
            return [1.0 / self.backends] * self.backends
        return [counts.get(b, 0) / total for b in range(self.backends)]
