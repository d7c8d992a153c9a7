"""The running requests that one more sequence can cost, kept as arrays.

Pricing one more sequence weighs every running high-priority request with an
end-to-end deadline (``Costs._exposure``). Walking them in Python each time was the
hot path of a busy gateway: at 1,024 running streams a quarter of its CPU. Here each
such request has a slot in a set of numpy arrays, written when it starts, reports
progress and leaves (O(1) each), with what one more sequence cost it when last priced,
so that a pricing prices afresh a bounded number of them (``to_price``) and reads the
rest back. The length distributions they follow are rows of one table of cumulative
weights (``Distributions``), refreshed when a distribution changes, so the chance of
every running request is computed in one pass even when they follow many.

What a pricing finds (``Exposure``) is read many times a round: each waiting kind the
queue's search weighs, and each hold ``_better_later`` considers, asks what a newcomer
running so long from so late would cost them. Summed over entries sorted by the time
they have left, that is two prefix sums and two binary searches, the same at 16 and at
1,024 running, where summing them afresh cost a dozen numpy passes each.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable

import numpy as np

from saber.scheduler._chance import QUADRATURE, normal_cdf
from saber.scheduler.lengths._histogram import BUCKETS_PER_DOUBLING, LengthEstimate, n_buckets

_TOP = float(n_buckets())  # the last edge's position on the buckets' log scale
PRICED_PER_ROUND = 64
"""Running requests priced afresh per pricing, at most (past it, the rest keep what they
were last priced at, the longest-priced first to be refreshed): so that a pricing costs
about the same at 64 and at 4,096 running. At most this many running, every pricing is
exact."""
LOAD_DRIFT = 0.25
"""A running request last priced at a load this far (relative) from today's is priced
afresh whatever the count: what one more sequence costs moves with the load."""


class Distributions:
    """Length distributions as rows of cumulative weights (P(L <= each bucket's lower
    edge)), one per distribution in use, refreshed when its version moves."""

    def __init__(self) -> None:
        self.table = np.zeros((4, n_buckets() + 1))
        self._rows: dict[Hashable, tuple[int, int]] = {}  # key -> (row, version)
        self._free: list[int] = list(range(4))

    def row(self, key: Hashable, est: LengthEstimate) -> int:
        """The row of ``est`` (named ``key``), current."""
        hit = self._rows.get(key)
        if hit is not None and hit[1] == est.version:
            return hit[0]
        if hit is None:
            if not self._free:
                grown = self.table.shape[0]
                self.table = np.vstack((self.table, np.zeros_like(self.table)))
                self._free = list(range(grown, 2 * grown))
            index = self._free.pop()
        else:
            index = hit[0]
        cum = np.cumsum(est.weights)
        self.table[index, 0] = 0.0
        self.table[index, 1:] = cum / cum[-1]
        self._rows[key] = (index, est.version)
        return index

    def forget(self, key: Hashable) -> None:
        hit = self._rows.pop(key, None)
        if hit is not None:
            self._free.append(hit[0])

    def cdf(self, rows: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """P(L <= tokens) for each element's distribution (``rows``, broadcast against
        ``tokens``), as ``LengthEstimate.cdf`` computes it: linear in log(tokens)
        within a bucket."""
        # log2 of at least 1 is at least 0: only the top needs a clip (np.clip's own
        # wrapper cost as much as the rest of this on the hot path).
        pos = np.minimum(np.log2(np.maximum(tokens, 1.0)) * BUCKETS_PER_DOUBLING, _TOP)
        low = np.minimum(pos.astype(np.int64), int(_TOP) - 1)
        frac = pos - low
        flat = self.table.ravel()  # a view: one flat index serves both edges
        at = rows * self.table.shape[1] + low
        start = flat.take(at)
        out: np.ndarray = start + frac * (flat.take(at + 1) - start)
        return out


class RunningSet:
    """Running requests admitted from the HPQ with an end-to-end deadline or a pace (a
    TPOT limit): a slot each in arrays of what their chance of meeting them depends on."""

    FIELDS = (
        *("deadline", "due", "made", "clock", "tokens", "limit", "kid", "pace", "first_at"),
        *("lost", "slope", "pace_lost", "pace_left", "priced_at", "priced_load"),
    )

    def __init__(self) -> None:
        self._slot: dict[str, int] = {}
        self._free: list[int] = []
        self.reports = 0  # progress reports taken: what a running request has made moved
        # The distributions the slots follow: key -> (id, slots that follow it).
        self._kids: dict[Hashable, list[int]] = {}
        self._kid_free: list[int] = []
        self._kid_keys: list[Hashable] = []  # id -> key
        self._kids_moved = 0  # a distribution came into use or left it
        self._by_kid = np.zeros(1, dtype=np.int64)  # id -> row, at ``refresh``
        self._by_kid_at: tuple[int, int] | None = None  # (version, _kids_moved) then
        size = 0
        self.deadline = np.zeros(size)
        self.due = np.zeros(size)  # its deadline less its prefill still to come
        self.made = np.zeros(size)  # tokens reported; NaN: none (read the token clock)
        self.clock = np.zeros(size)  # the token clock at its admission
        self.tokens = np.zeros(size)  # its expected (or exact) length
        self.limit = np.zeros(size)  # its cap; its length, if exact
        self.kid = np.zeros(size, dtype=np.int64)  # its distribution's id; -1: certain
        self.row = np.zeros(0, dtype=np.int64)  # rows of the live slots, at ``refresh``
        self.pace = np.zeros(size)  # tokens/s its TPOT limit asks for; 0: none
        self.first_at = np.zeros(size)  # when its first token came; NaN: not yet
        # What one more sequence costs it, as last priced (``Costs._exposure``): its
        # deadline's chance lost, that loss per second put off, its pace's chance lost
        # and the seconds it had left to run; when and at what load (NaN: never).
        self.lost = np.zeros(size)
        self.slope = np.zeros(size)
        self.pace_lost = np.zeros(size)
        self.pace_left = np.zeros(size)
        self.priced_at = np.zeros(size)
        self.priced_load = np.zeros(size)
        self.e2e = np.zeros(size, dtype=bool)  # it races an end-to-end deadline
        self.live = np.zeros(size, dtype=bool)
        self.dists = Distributions()

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, req_id: object) -> bool:
        return req_id in self._slot

    def add(
        self,
        req_id: str,
        *,
        deadline: float,
        due: float,
        clock: float,
        tokens: float,
        limit: float,
        key: Hashable | None,
        e2e: bool = True,
        pace: float = 0.0,
    ) -> None:
        """A request starts; ``key`` names the distribution its length follows (None:
        its length is taken as certain); ``e2e``: it races an end-to-end deadline;
        ``pace``: its TPOT limit's tokens/s (0: none)."""
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slot[req_id] = slot
        self.kid[slot] = -1 if key is None else self._use(key)
        self.deadline[slot] = deadline
        self.due[slot] = due
        self.made[slot] = math.nan
        self.clock[slot] = clock
        self.tokens[slot] = tokens
        self.limit[slot] = limit
        self.e2e[slot] = e2e
        self.pace[slot] = pace
        self.first_at[slot] = math.nan
        self.priced_at[slot] = math.nan
        self.live[slot] = True

    def _use(self, key: Hashable) -> int:
        hit = self._kids.get(key)
        if hit is None:
            if self._kid_free:
                kid = self._kid_free.pop()
                self._kid_keys[kid] = key
            else:
                kid = len(self._kid_keys)
                self._kid_keys.append(key)
            hit = self._kids[key] = [kid, 0]
            self._kids_moved += 1
        hit[1] += 1
        return hit[0]

    def progress(self, req_id: str, tokens: int, first_at: float | None) -> None:
        """It has made ``tokens``, the first of them at ``first_at`` (None: none yet);
        once it has, its prefill is done."""
        slot = self._slot.get(req_id)
        if slot is not None:
            self.reports += 1
            self.made[slot] = tokens
            if first_at is not None:
                self.due[slot] = self.deadline[slot]
                if math.isnan(self.first_at[slot]):
                    self.first_at[slot] = first_at

    def remove(self, req_id: str) -> None:
        slot = self._slot.pop(req_id, None)
        if slot is None:
            return
        self.live[slot] = False
        kid = int(self.kid[slot])
        if kid >= 0:
            key = self._kid_keys[kid]
            hit = self._kids[key]
            hit[1] -= 1
            if not hit[1]:
                del self._kids[key]
                self._kid_free.append(kid)
                self._kids_moved += 1
                self.dists.forget(key)
        self._free.append(slot)

    def to_price(self, slots: np.ndarray, load: int) -> np.ndarray:
        """Which of ``slots`` (more than PRICED_PER_ROUND) to price afresh: those never
        priced or priced at a load more than LOAD_DRIFT away, and then the longest since
        priced, up to PRICED_PER_ROUND in all."""
        at = self.priced_at[slots]
        new = np.isnan(at) | (np.abs(self.priced_load[slots] - load) > LOAD_DRIFT * load)
        must: np.ndarray = slots[new]
        room = PRICED_PER_ROUND - must.size
        if room <= 0:
            return must
        rest = slots[~new]
        oldest = rest[np.argpartition(at[~new], room)[:room]]
        out: np.ndarray = np.concatenate((must, oldest))
        return out

    def refresh(
        self,
        live: np.ndarray,
        estimate: Callable[[Hashable], LengthEstimate | None],
        version: int,
    ) -> None:
        """The current row of each ``live`` slot's distribution (``estimate(key)``; None:
        not learned, its length taken as certain) into ``row``: one pass per
        distribution in use, not per slot, and none while neither the distributions
        (``version``) nor those in use changed. ``live``: a mask, or the slots'
        indices."""
        state = (version, self._kids_moved)
        if self._by_kid_at != state:
            by_kid = np.full(len(self._kid_keys) + 1, -1, dtype=np.int64)  # [-1]: certain
            for key, (kid, _) in self._kids.items():
                est = estimate(key)
                if est is not None:
                    by_kid[kid] = self.dists.row(key, est)
            self._by_kid, self._by_kid_at = by_kid, state
        self.row = self._by_kid[self.kid[live]]

    def _grow(self) -> None:
        size = len(self.live)
        grown = max(2 * size, 16)
        for name in self.FIELDS:
            old = getattr(self, name)
            setattr(self, name, np.concatenate((old, np.zeros(grown - size, dtype=old.dtype))))
        self.live = np.concatenate((self.live, np.zeros(grown - size, dtype=bool)))
        self.e2e = np.concatenate((self.e2e, np.zeros(grown - size, dtype=bool)))
        self._free = list(range(grown - 1, size - 1, -1))

    def chances(
        self,
        live: np.ndarray,
        made: np.ndarray,
        budgets: np.ndarray,
        sigma: float,
    ) -> np.ndarray:
        """P(each live slot's rest is made within each row of ``budgets``) (shape (k,
        n)): ``saber.scheduler._chance.running_chance`` for every slot at once, their
        rows as ``refresh`` left them."""
        rows = self.row
        limit = self.limit[live]
        certain = rows < 0
        if not certain.any():  # every one follows a distribution: no masks
            return self._spread_chances(rows, made, limit, budgets, sigma)
        out = np.zeros_like(budgets)
        rest = np.minimum(
            np.maximum(self.tokens[live][certain] - made[certain], 1.0),
            np.maximum(limit[certain] - made[certain], 0.0),
        )
        with np.errstate(divide="ignore"):
            z = np.log(np.maximum(budgets[:, certain], 1e-300) / np.maximum(rest, 1e-9))
        out[:, certain] = np.where(rest <= 0.0, 1.0, normal_cdf(z / max(sigma, 1e-6)))
        spread = ~certain
        if spread.any():
            out[:, spread] = self._spread_chances(
                rows[spread], made[spread], limit[spread], budgets[:, spread], sigma
            )
        return np.where(budgets > 0, out, 0.0)

    def beyond_reach(
        self, live: np.ndarray, made: np.ndarray, budgets: list[np.ndarray], sigma: float
    ) -> bool:
        """Whether each ``live`` slot (its rows as ``refresh`` left them) follows a
        distribution and reaches its cap within every one of ``budgets`` even at the
        speed's slowest quadrature node: then each of its ``chances`` is the same at
        every budget (``_spread_chances`` counts every node as made), and one more
        sequence costs it exactly nothing. The usual state of an engine with room."""
        if (self.row < 0).any():
            return False
        limit = self.limit[live]
        slowest = float(_scales(sigma).min())
        return all(bool(np.all(made + b * slowest >= limit)) for b in budgets)

    def _spread_chances(
        self,
        rows: np.ndarray,
        made: np.ndarray,
        limit: np.ndarray,
        budgets: np.ndarray,
        sigma: float,
    ) -> np.ndarray:
        """``chances`` of slots that follow a distribution (``rows``): P(the rest is
        made within each budget | made so far), over the speed's three quadrature
        nodes. Every node and the length made so far in one lookup (shape (1 + nodes x
        k, n)): a pricing is a few dozen numpy calls whatever the count, and each
        call's overhead, not its arithmetic, is most of what it costs below a thousand
        running."""
        k, n = budgets.shape
        reach = made + budgets * _scales(sigma)  # (nodes, k, n)
        points = np.empty((1 + 3 * k, n))
        points[0] = made
        points[1:] = reach.reshape(3 * k, n)
        cdf = self.dists.cdf(rows, points)
        before = cdf[0]
        alive = 1.0 - before
        dead = alive <= 1e-12
        alive = np.where(dead, 1.0, alive)
        done = (cdf[1:].reshape(3, k, n) - before) / alive
        part = np.where((reach >= limit) | dead, 1.0, done)
        (w0, w1, w2) = (w for _, w in QUADRATURE)
        out: np.ndarray = w0 * part[0] + w1 * part[1] + w2 * part[2]
        return np.where(budgets > 0, out, 0.0)


@functools.lru_cache(maxsize=8)  # the spread moves at every finish: the last few
def _scales(sigma: float) -> np.ndarray:
    """The speed's factor at each quadrature node (shape (nodes, 1, 1))."""
    return np.array([math.exp(sigma * z) for z, _ in QUADRATURE])[:, None, None]


class _Sums:
    """Entries sorted by the time they have left, with the prefix sums of their loss
    (``whole``) and of their loss per second (``rate``), each with a leading 0."""

    __slots__ = ("left", "rate", "whole")

    def __init__(self, lost: np.ndarray, left: np.ndarray) -> None:
        order = left.argsort()
        self.left = left[order]
        lost = lost[order]
        self.whole = np.zeros(lost.size + 1)
        self.rate = np.zeros(lost.size + 1)
        np.add.accumulate(lost, out=self.whole[1:])  # np.cumsum less its wrapper
        np.add.accumulate(lost / self.left, out=self.rate[1:])

    def cost(self, runs: float, delay: float) -> float:
        """sum(lost * min(runs, max(left - delay, 0)) / left): the entries that end
        within the delay lose nothing, those that end within the run lose what of their
        time it covers, the rest ``runs`` seconds of theirs."""
        left, whole, rate = self.left, self.whole, self.rate
        j = int(left.searchsorted(delay + runs, "right"))
        p = runs * float(rate[-1] - rate[j]) if j < left.size else 0.0  # runs may be inf
        if delay:
            i = int(left.searchsorted(delay, "right"))
            return p + float(whole[j] - whole[i]) - delay * float(rate[j] - rate[i])
        return p + float(whole[j])


class Exposure:
    """What one more sequence costs the running requests (``Costs._exposure``): per
    entry, the chance lost were the newcomer to run all the time it has left, and that
    time; per deadline, the chance lost per second its decoding is put off (a
    newcomer's prefill; None when not counted); and which entries are paces (None: none
    are)."""

    __slots__ = ("_sums", "left", "lost", "paced", "slope")

    def __init__(
        self,
        lost: np.ndarray,
        left: np.ndarray,
        slope: np.ndarray | None = None,
        paced: np.ndarray | None = None,
    ) -> None:
        self.lost, self.left, self.slope, self.paced = lost, left, slope, paced
        self._sums: dict[bool, _Sums] = {}

    def cost(self, runs: float, delay: float = 0.0, paces: bool = False) -> float:
        """The chance the entries lose to a newcomer that runs ``runs`` s from ``delay``
        s on (``paces``: the paces' entries alone)."""
        sums = self._sums.get(paces)
        if sums is None:
            lost, left = self.lost, self.left
            if paces:
                assert self.paced is not None
                lost, left = lost[self.paced], left[self.paced]
            sums = self._sums[paces] = _Sums(lost, left)
        return sums.cost(runs, delay)

    def prefill_cost(self, prefill_s: float, delay: float = 0.0) -> float:
        """The deadlines' chance lost to a newcomer's prefill of ``prefill_s`` s that puts
        off their decoding, each entry's at most 1, those ending within ``delay`` none."""
        assert self.slope is not None
        hit = np.minimum(self.slope * prefill_s, 1.0)
        return float(np.sum(hit[self.left > delay]) if delay else np.sum(hit))


Running = Exposure | None
