"""Several gateways in front of one pool of replicas, with no shared store.

An L7 balancer hashes each team's API key to one gateway; each gateway runs its own
admission pool over every replica and learns what the others put on a replica only by
scraping the replica's ``/metrics`` (running + waiting, and the growth of its histogram
of time to first token: every gateway's requests' mean wait) now and then. Here a trace
request is its own client (the trace has no API keys): it goes to gateway
``crc32(id) % M``. Gateway g scrapes at ``g * scrape_s / M + k * scrape_s``, so the
gateways' scrapes are staggered as independent processes' would be. Between its
scrapes a gateway knows only its own admissions and finishes.

``Gateways`` keeps what the simulator needs for that: which gateway owns each request,
each gateway's requests in each engine, what each admitted since its last scrape, its
view at that scrape, and the counts that check the view against the engines.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from saber.scheduler import budget_of, derived_headroom
from saber.sim._cluster_types import AdmissionPool, GatewayStats

SCRAPE_S = 0.2
"""How often each gateway scrapes every replica's ``/metrics`` (100-250 ms in practice)."""


def gateway_of(req_id: str, gateways: int) -> int:
    """The gateway a request goes to: a stable hash of its id, as a balancer hashes an
    API key (``hash()`` is salted per process; crc32 is the same in every run)."""
    return zlib.crc32(req_id.encode()) % gateways


def _grid(rows: int, cols: int) -> list[list[int]]:
    return [[0] * cols for _ in range(rows)]


@dataclass(eq=False)
class Gateways:
    """The gateways' state in one run. ``headroom``: None for ``derived_headroom``, else
    a fixed number of requests (0: none), which is also a bound: each gateway admits at
    most ``budget_of(headroom, M)`` at a replica in any ``scrape_s``."""

    pools: Sequence[AdmissionPool]
    replicas: int
    scrape_s: float = SCRAPE_S
    headroom: int | None = None
    owner: dict[str, int] = field(default_factory=dict)  # request id -> its gateway

    def __post_init__(self) -> None:
        m, n = len(self.pools), self.replicas
        if not m:
            raise ValueError("simulate_cluster needs at least one gateway")
        if len({id(p) for p in self.pools}) != m:
            raise ValueError("each gateway's pool may appear once")
        if not self.scrape_s > 0:
            raise ValueError(f"scrape_s must be > 0, not {self.scrape_s}")
        if self.headroom is not None and self.headroom < 0:
            raise ValueError(f"headroom must be >= 0, not {self.headroom}")
        self.own = _grid(m, n)  # gateway g's requests in engine b, finish not yet heard
        self.since = _grid(m, n)  # what g admitted to b since its last scrape
        self.seen = _grid(m, n)  # what g saw at b at its last scrape (not its own)
        self.head = _grid(m, n)  # and the headroom it added then
        fixed = self.headroom
        if fixed and m > 1:
            # A fixed headroom is kept from the start, and bounds what each gateway
            # admits at a replica per scrape interval (``budget_of``): what the others
            # admitted since its last scrape is then never more than the headroom.
            budget = budget_of(fixed, m)
            for g, pool in enumerate(self.pools):
                pool.set_budget(budget, self.scrape_s)
                for b in range(n):
                    self.head[g][b] = fixed
                    pool.set_elsewhere(b, 0, fixed, 0.0)
        # Each replica's time-to-first-token histogram (sum, count), and each gateway's
        # reading of it at its last scrape.
        self.ttft = [(0.0, 0)] * n
        self.ttft_read = [[(0.0, 0)] * n for _ in range(m)]
        self.scrapes = [0] * m
        self.offered = [0] * m
        self.unseen_steps = _grid(m, n)
        self.max_unseen = _grid(m, n)

    @property
    def count(self) -> int:
        return len(self.pools)

    def take(self, req_id: str) -> AdmissionPool:
        """The pool of the gateway an arrival is hashed to."""
        g = self.owner[req_id] = gateway_of(req_id, self.count)
        self.offered[g] += 1
        return self.pools[g]

    def next_scrape(self) -> tuple[float, int]:
        """The next scrape: its time and gateway. One gateway never scrapes: it knows
        everything that runs, and its run stays that of a single pool."""
        m = self.count
        if m == 1:
            return math.inf, 0
        return min((g * self.scrape_s / m + self.scrapes[g] * self.scrape_s, g) for g in range(m))

    def stale(self) -> bool:
        """Whether a scrape could still change what some gateway counts elsewhere: it saw
        something, or admitted since its scrape, or holds a derived headroom. Once every
        engine is idle this is false within two rounds of scrapes, and the run ends."""
        derived = self.headroom is None
        return any(
            any(seen) or any(since) or (derived and any(head))
            for seen, since, head in zip(self.seen, self.since, self.head, strict=True)
        )

    def admitted(self, g: int, backend: int) -> None:
        self.own[g][backend] += 1
        self.since[g][backend] += 1

    def finished(self, g: int, backend: int) -> None:
        self.own[g][backend] -= 1

    def first_token(self, backend: int, wait: float) -> None:
        """A request at ``backend`` made its first token ``wait`` seconds after it
        reached the engine (vLLM's ``vllm:time_to_first_token_seconds``)."""
        total, count = self.ttft[backend]
        self.ttft[backend] = (total + wait, count + 1)

    def scraped(self, g: int, now: float, seen: Sequence[int]) -> None:
        """Gateway ``g`` scraped every replica at ``now``: ``seen[b]`` requests at ``b``
        are not its own. Its pool hears them and the headroom, and the mean time to
        first token of the requests that made their first one at ``b`` since its last
        scrape, as the gateway reads it (``Replicas.scraped``); call ``poll`` next."""
        m = self.count
        for b, s in enumerate(seen):
            fixed = self.headroom
            head = derived_headroom(m, self.since[g][b]) if fixed is None else fixed
            self.seen[g][b], self.head[g][b] = s, head
            self.since[g][b] = 0
            self.pools[g].set_elsewhere(b, s, head, now)
            (total, count), (then, before) = self.ttft[b], self.ttft_read[g][b]
            if count > before:
                self.pools[g].set_first_token_wait(b, (total - then) / (count - before))
            self.ttft_read[g][b] = self.ttft[b]
        self.scrapes[g] += 1

    def step_starts(self, backend: int, in_engine: int) -> None:
        """Engine ``backend`` starts a step holding ``in_engine`` requests: each
        gateway's view of it is checked. During a run of steps the count only falls (a
        request joins at a step boundary), so the start is where it is largest."""
        for g in range(self.count):
            view = self.own[g][backend] + self.seen[g][backend] + self.head[g][backend]
            short = in_engine - view
            if short > 0:
                self.unseen_steps[g][backend] += 1
                self.max_unseen[g][backend] = max(self.max_unseen[g][backend], short)

    def stats(self) -> list[GatewayStats]:
        return [
            GatewayStats(
                g,
                self.offered[g],
                self.scrapes[g],
                tuple(self.unseen_steps[g]),
                tuple(self.max_unseen[g]),
            )
            for g in range(self.count)
        ]
