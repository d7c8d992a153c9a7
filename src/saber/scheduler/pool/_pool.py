"""Admission over a pool of backends: one scheduler each, one place for each request.

Each backend (a vLLM replica) keeps its own speed model, load and queues: a
``Scheduler``; the pool's backends share what they learn of the tasks' lengths. A
request is placed on a backend that would admit it now, if any, where placing it is
worth most: its chance of meeting its deadline at that backend's load + 1, less what it
costs the requests running there and those to come (``placement_value``). After every
event each backend admits what it can, then the pool moves waiting requests to any
other backend that would admit them now (and not hold them there for later) and is not
slower (``SLOWER``), the most urgent first, to where they are worth most; an idle
engine, however slow, takes the most urgent request waiting anywhere. So admission asks
whether some backend can still serve a request in time, not whether the one it was
placed on can. What one more sequence costs the requests still to come is priced on the
pool's arrivals, in each backend's share of the pool's recent starts: a backend that few
requests are placed on still runs those moved to it.

A backend may be taken out of service (``set_down``: its circuit breaker opened): it
is paused, so that nothing is placed or admitted there and what waits there moves on,
as long as another backend serves; when none does, the pool serves as if all were up
(a request tries, and fails cleanly, rather than waiting for nothing).

``affinity_margin`` keeps a session on one backend (its prefix cache pays off): a
request with an ``affinity`` key goes to the key's backend, picked by rendezvous hashing
over the backends in service, as long as its value there is within the margin of the
best; never at a missed deadline, so moving what waits (rebalancing) ignores it.

``place`` names the baselines' placement instead (round-robin, least loaded): they
place once and never move a request, as a router in front of per-backend admission.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from saber.config import TaskType
from saber.scheduler._arrivals import Arrivals, Shares
from saber.scheduler._core import Scheduler
from saber.scheduler._placing import anything, never
from saber.scheduler._policy import Policy
from saber.scheduler._request import Action, Decision, Outcome, SchedRequest, Tier
from saber.scheduler._speed_model import SpeedFn, TTFTFn
from saber.scheduler.lengths._task_lengths import TaskLengths
from saber.scheduler.pool._sharing import Affinity, rendezvous

Placement = Literal["chance", "round-robin", "least-loaded"]
PLACEMENTS: tuple[Placement, ...] = ("chance", "round-robin", "least-loaded")
TIE = 0.01
"""Values closer than this are a tie: the backend that keeps more of its own f(1) wins."""
SLOWER = 0.9
"""A backend whose f(1) is below this share of another's is slower than it: the kinds of
GPU in one pool differ by 1.5x and more, while twins whose curves were learned apart
differ by a few percent and stay alike."""


@dataclass(frozen=True, slots=True)
class Placed:
    """A decision, and the backend it concerns (where an admitted request runs)."""

    decision: Decision
    backend: int


class Pool:
    """SABER's admission over several backends, driven like one ``Scheduler``."""

    def __init__(
        self,
        backends: Sequence[Scheduler],
        *,
        place: Placement = "chance",
        affinity_margin: float | None = None,
        names: Sequence[str] | None = None,
    ) -> None:
        """``affinity_margin``: how much of a request's value (a chance, 0..1) placing it
        on its session's backend may give up against the best backend; None: no
        affinity (every decision as without it). ``names``: each backend's, what a
        session is hashed with, so that reordering the backends moves no session
        (default: their positions)."""
        if not backends:
            raise ValueError("a pool needs at least one backend")
        if place not in PLACEMENTS:
            raise ValueError(f"unknown placement {place!r}; known: {', '.join(PLACEMENTS)}")
        if affinity_margin is not None and not 0.0 <= affinity_margin <= 1.0:
            raise ValueError(f"an affinity margin must be within 0..1, not {affinity_margin}")
        lengths = backends[0].lengths
        if any(b.lengths is not lengths for b in backends):
            raise ValueError("the backends of a pool must share one TaskLengths")
        self.backends = list(backends)
        self.lengths = lengths
        self.place = place
        self._where: dict[str, int] = {}  # request id -> its backend, until it leaves
        self._cursor = 0
        self._down = [False] * len(self.backends)
        self.names = [str(i) for i in range(len(self.backends))] if names is None else list(names)
        if len(set(self.names)) != len(self.backends):
            raise ValueError(f"need one distinct name per backend, got {self.names}")
        self.affinity_margin = affinity_margin
        self.affinity = Affinity()
        # One backend prices its own arrivals; several share the pool's, each in its
        # share of the pool's recent starts.
        self._shares = Shares(len(self.backends)) if len(self.backends) > 1 else None
        if self._shares is not None:
            arrivals = Arrivals()
            for backend in self.backends:
                backend.join_pool(arrivals)

    @classmethod
    def build(
        cls,
        speeds: Sequence[SpeedFn],
        policy: Policy | None = None,
        *,
        tasks: Mapping[str, TaskType] | Iterable[TaskType] = (),
        ttfts: Sequence[TTFTFn | None] | None = None,
        speed_sigmas: Sequence[float | None] | None = None,
        prefills: Sequence[tuple[float, float] | None] | None = None,
        seed: int = 0,
        place: Placement = "chance",
        arrival_share: float = 1.0,
        affinity_margin: float | None = None,
    ) -> Pool:
        """One scheduler per backend's f(L) (and TTFT fit, spread and prefill), sharing
        lengths;
        ``arrival_share``: of the requests that arrive for the pool, those this gateway
        sees (1/M of M gateways behind an even balancer)."""
        policy = policy or Policy()
        task_list = list(tasks.values()) if isinstance(tasks, Mapping) else list(tasks)
        lengths = TaskLengths(
            task_list, learn=policy.learn_lengths, condition=policy.condition_lengths
        )
        n = len(speeds)
        ttfts = ttfts or [None] * n
        sigmas = speed_sigmas or [None] * n
        prefill = prefills or [None] * n
        backends = [
            Scheduler(
                speed,
                policy,
                tasks=task_list,
                ttft=ttfts[i],
                seed=seed + i,
                speed_sigma=sigmas[i],
                lengths=lengths,
                prefill=prefill[i],
            )
            for i, speed in enumerate(speeds)
        ]
        for backend in backends:
            backend.set_arrival_share(arrival_share)
        return cls(backends, place=place, affinity_margin=affinity_margin)

    # -- events ----------------------------------------------------------

    def offer(self, req: SchedRequest, now: float) -> list[Placed]:
        if req.id in self._where:
            raise ValueError(f"request {req.id} is already known to the pool")
        self._share_out(now)
        self.backends[0].price_prefill(req)  # each backend prices it again on its offer
        home = self._home(req, now)
        self._where[req.id] = home
        try:
            decisions = self.backends[home].offer(req, now)
        except Exception:
            del self._where[req.id]  # refused before anything changed (Scheduler.offer)
            raise
        return self._tagged(home, decisions) + self._rebalance(now)

    def poll(self, now: float) -> list[Placed]:
        self._share_out(now)
        out: list[Placed] = []
        for i, backend in enumerate(self.backends):
            out += self._tagged(i, backend.poll(now))
        return out + self._rebalance(now)

    def progress(self, req_id: str, tokens: int, now: float) -> None:
        home = self._where.get(req_id)
        if home is not None:
            self.backends[home].progress(req_id, tokens, now)

    def finish(
        self,
        req_id: str,
        now: float,
        tokens: int | None = None,
        prompt_tokens: int | None = None,
    ) -> Outcome | None:
        home = self._where.get(req_id)
        if home is None:
            return None
        # If it raises, cancel may.
        outcome = self.backends[home].finish(req_id, now, tokens, prompt_tokens)
        del self._where[req_id]
        return outcome

    def cancel(self, req_id: str, now: float) -> Outcome | None:
        home = self._where.get(req_id)
        if home is None:
            return None
        outcome = self.backends[home].cancel(req_id, now)
        del self._where[req_id]
        return outcome

    def next_wakeup(self) -> float | None:
        times = [t for b in self.backends if (t := b.next_wakeup()) is not None]
        return min(times) if times else None

    def set_elsewhere(self, backend: int, seen: int, headroom: int, now: float) -> None:
        """What runs at ``backend`` that this pool did not admit (other gateways'), as
        last scraped, and a headroom for their admissions since
        (``Scheduler.set_elsewhere``)."""
        self.backends[backend].set_elsewhere(seen, headroom, now)

    def set_first_token_wait(self, backend: int, seconds: float) -> None:
        """``backend``'s engine's mean time to first token over its last read
        (``Placing.set_first_token_wait``)."""
        self.backends[backend].set_first_token_wait(seconds)

    def set_budget(self, most: int | None, window_s: float = 0.0) -> None:
        """Each backend admits at most ``most`` sequences in any ``window_s`` seconds
        (``Scheduler.set_budget``; None: no bound)."""
        for b in self.backends:
            b.set_budget(most, window_s)

    def set_down(self, backend: int, down: bool) -> None:
        """Take ``backend`` out of service, or back in; ``poll`` next, so that what
        waits there moves on (or, back in, what waits anywhere may run there)."""
        self._down[backend] = down
        serving = not all(self._down)
        for i, b in enumerate(self.backends):
            b.paused = self._down[i] and serving

    def is_down(self, backend: int) -> bool:
        return self._down[backend]

    def backend_of(self, req_id: str) -> int | None:
        return self._where.get(req_id)

    def is_running(self, req_id: str) -> bool:
        home = self._where.get(req_id)
        return home is not None and self.backends[home].is_running(req_id)

    def is_queued(self, req_id: str) -> bool:
        home = self._where.get(req_id)
        return home is not None and self.backends[home].is_queued(req_id)

    def time_to_free(self, now: float, q: float = 0.5) -> float | None:
        """Seconds until a slot frees somewhere in the pool, with chance at least ``q``
        (the soonest of the backends' own ``q``-quantiles); None when nothing runs."""
        times = [
            t for b in self.backends if not b.paused and (t := b.time_to_free(now, q)) is not None
        ]
        return min(times) if times else None

    def time_to_room(self, task: str, now: float, q: float = 0.5) -> float | None:
        """Seconds until a backend's queue for ``task`` has room, with chance at least
        ``q``: the soonest of the backends', each when as many slots have freed there as
        a request of ``task`` waits behind (``Scheduler.slots_until_room``)."""
        times = [
            t
            for b in self.backends
            if not b.paused and (t := b.time_to_free(now, q, b.slots_until_room(task))) is not None
        ]
        return min(times) if times else None

    @property
    def load(self) -> int:
        return sum(b.load for b in self.backends)

    def queued(self, task: str | None = None, tier: Tier | None = None) -> int:
        return sum(b.queued(task, tier) for b in self.backends)

    # -- placement ---------------------------------------------------------

    def _home(self, req: SchedRequest, now: float) -> int:
        backends = self.backends
        if len(backends) == 1:
            return 0
        live = [i for i, b in enumerate(backends) if not b.paused]
        if self.place == "round-robin":
            while backends[self._cursor].paused:
                self._cursor = (self._cursor + 1) % len(backends)
            home, self._cursor = self._cursor, (self._cursor + 1) % len(backends)
            return home
        if self.place == "least-loaded":
            return min(live, key=lambda i: (backends[i].load + backends[i].queued(), i))
        # Where it would be admitted now, if anywhere; among those, where it is worth most.
        ready = [i for i in live if backends[i].admissible(req, now)]
        if self.affinity_margin is None or req.affinity is None:
            return max(ready or live, key=lambda i: self._score(i, req, now))
        return self._affine_home(req, ready or live, live, self.affinity_margin, now)

    def _affine_home(
        self,
        req: SchedRequest,
        candidates: list[int],
        live: list[int],
        margin: float,
        now: float,
    ) -> int:
        """The session's backend (rendezvous over those in service) if it is among the
        ``candidates`` and worth at least the best one's value less ``margin``; else
        the best, as without affinity."""
        assert req.affinity is not None
        values = {i: self.backends[i].placement_value(req, now) for i in candidates}
        best = max(candidates, key=lambda i: self._score(i, req, now, values[i]))
        affine = live[rendezvous(req.affinity, [self.names[i] for i in live])]
        if affine in values and values[affine] >= max(values.values()) - margin:
            self.affinity.kept += 1
            return affine
        self.affinity.broken += 1
        return best

    def _score(
        self, i: int, req: SchedRequest, now: float, value: float | None = None
    ) -> tuple[int, float, float, int]:
        """What placing it at backend ``i`` is worth (its chance there less what it
        costs the requests there and to come; ``value`` if already known), in steps of
        TIE; then the share of its own solo speed f(1) the backend would keep (on its
        curve: twins at the same load tie, and the less loaded wins); then the faster;
        then the lower index."""
        backend = self.backends[i]
        load = backend.load + req.seqs
        if value is None:
            value = backend.placement_value(req, now)
        share = backend.kept_share(load)
        return (math.floor(value / TIE + 1e-9), share, backend.predicted_speed(load), -i)

    def _rebalance(self, now: float) -> list[Placed]:
        """Move waiting requests to backends that would admit them now."""
        if len(self.backends) == 1:
            return []
        out: list[Placed] = []
        while (move := self._next_move(now)) is not None:
            src, req, dst = move
            taken = self.backends[src].take(req.id)
            assert taken is req
            self._where[req.id] = dst
            out.append(Placed(self.backends[dst].start_taken(req, now), dst))
            self._started(dst, req.seqs, now)
        return out

    def _next_move(self, now: float) -> tuple[int, SchedRequest, int] | None:
        """The most urgent request waiting at one backend that another would admit now
        (the HPQ's before demoted work), to where its chance is highest. Not to a slower
        backend, unless that one is idle or where it waits is out of service: a busy
        backend holds back the requests that cost it most, the long ones, and a slower
        one would take exactly those, which need speed most."""
        for tier in (Tier.HIGH, Tier.LOW):
            if not any(b.queued(tier=tier) for b in self.backends):
                continue
            found: list[tuple[float, str, tuple[float, ...], int, SchedRequest, int]] = []
            for dst, backend in enumerate(self.backends):
                rules = self._rules(backend, tier, now)
                if rules is None:
                    continue
                rule, holds = rules
                for src, other in enumerate(self.backends):
                    if src == dst or (rule is not anything and self._slower(dst, src)):
                        continue
                    req = other.most_urgent_waiting(tier, rule)
                    if req is None or not backend.has_room(req) or self._stays(req, other, now):
                        continue
                    if req.seqs > 1 and rule is not anything and not backend.admissible(req, now):
                        continue
                    if tier is Tier.HIGH and holds(req):
                        continue  # worth more there later: it may as well wait here
                    score = self._score(dst, req, now)
                    negated = tuple(-x for x in score)
                    found.append((req.due, req.id, negated, src, req, dst))
            if found:
                _, _, _, src, req, dst = min(found, key=lambda f: f[:3])
                return src, req, dst
        return None

    def _slower(self, dst: int, src: int) -> bool:
        """Whether backend ``dst`` is slower than ``src`` (``SLOWER``); never while
        ``src`` is out of service, so that what waits there moves on."""
        fast = self.backends[src]
        return not fast.paused and self.backends[dst].solo_speed < SLOWER * fast.solo_speed

    def _stays(self, req: SchedRequest, backend: Scheduler, now: float) -> bool:
        """A session's request that its backend would admit now, yet holds because it
        is worth more there a little later, stays: its prefix cache is there, and the
        margin bounds what affinity may cost, not what waiting gains."""
        return (
            self.affinity_margin is not None
            and req.affinity is not None
            and backend.admissible(req, now)
        )

    def _started(self, backend: int, seqs: int, now: float) -> None:
        if self._shares is not None:
            self._shares.observe(backend, seqs, now)
            self._share_out(now)

    def _share_out(self, now: float) -> None:
        """Tell each backend its share of the pool's recent starts."""
        if self._shares is not None:
            self._shares.expire(now)
            for backend, share in zip(self.backends, self._shares.shares(), strict=True):
                backend.set_place_share(share)

    def _rules(
        self, backend: Scheduler, tier: Tier, now: float
    ) -> tuple[Callable[[SchedRequest], float], Callable[[SchedRequest], bool]] | None:
        """What passes at ``backend`` now, and what of that it would hold for later:
        anything, held never, when it is idle (an idle engine is never kept idle), else
        its own rules (``Placing.move_rules``); nothing moves to a paused backend, nor
        under the baselines' placements."""
        if self.place != "chance" or backend.paused:
            return None
        if backend.engine_idle and not backend.queued():
            return anything, never
        return backend.move_rules(tier, now)

    def _tagged(self, backend: int, decisions: list[Decision]) -> list[Placed]:
        for d in decisions:
            if d.action is Action.REJECT:
                self._where.pop(d.request.id, None)
            elif d.action is Action.ADMIT:
                self._started(backend, d.request.seqs, d.at)
        return [Placed(d, backend) for d in decisions]
