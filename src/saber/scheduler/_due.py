"""When waiting requests are next due for a check (a demotion, an expiry), by group.

A waiting request's demotion and expiry times are its arrival plus an offset that
depends only on what its group shares (its kind, its prompt's size and its first-token
limit) and on the speed and its length distribution. So the times are kept per group,
each a heap of its requests' arrivals and one offset, and a new speed or a grown need
moves the offsets of the groups (``retime``), not every request's time: at 10,000
waiting that was a pass of 50 to 350 milliseconds on the event that learned it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable, Iterator

from saber.scheduler._request import SchedRequest

Due = Callable[[SchedRequest], "float | None"]
"""When a request is due (None: never); less its arrival, the same for its whole group."""


def _offset(req: SchedRequest, at: float | None) -> float | None:
    """``at`` less ``req``'s arrival, rounded up so that arrival plus it is not before
    ``at``: a request found not yet due is put back after the time it was checked at."""
    if at is None:
        return None
    offset = at - req.arrival
    while req.arrival + offset < at:
        offset = math.nextafter(offset, math.inf)
    return offset


class DueTimes:
    """Waiting requests by group, each group's requests in order of arrival, and the
    earliest time across groups. Lazy: a request that left is dropped when it surfaces,
    and an entry of the groups' heap whose group moved is re-timed when it surfaces."""

    def __init__(self) -> None:
        self._groups: dict[Hashable, list[tuple[float, str]]] = {}
        self._offset: dict[Hashable, float | None] = {}
        self._member: dict[Hashable, SchedRequest] = {}  # one request of each group
        self._top: list[tuple[float, int, Hashable]] = []  # (time, tie-break, group)
        self._seq = itertools.count()

    @staticmethod
    def key(req: SchedRequest) -> Hashable:
        return (req.kind, req.carried.prompt_tokens, round(req.first_by - req.arrival, 9))

    def push(self, req: SchedRequest, at: float | None) -> None:
        """``req`` waits, due at ``at`` (None: never) by what holds now: its group takes
        the earlier of that and what it had, checked again when it comes."""
        self._add(req, _offset(req, at), later=False)

    def later(self, req: SchedRequest, at: float | None) -> None:
        """``req``, found not yet due, is due at ``at``: so is its group, by as much. A
        group's offset only grows here, so that its members' times, which may differ
        from one offset in their last bits, do not take turns being not yet due."""
        self._add(req, _offset(req, at), later=True)

    def retime(self, time: Due) -> None:
        """Every group's offset afresh (the speed or the needs moved): one call each."""
        self._top = []
        for key, heap in self._groups.items():
            member = self._member[key]
            self._offset[key] = _offset(member, time(member))
            if heap:
                self._push_top(key, heap[0][0])

    def _add(self, req: SchedRequest, offset: float | None, *, later: bool) -> None:
        """``req`` into its group, whose offset moves to ``offset`` where that is
        earlier (``later``: later) than its own."""
        key = self.key(req)
        heap = self._groups.get(key)
        if heap is None:
            if offset is None:
                return  # never due: a group of none
            heap = self._groups[key] = []
            self._member[key] = req
            self._offset[key] = offset
        elif offset is not None:
            known = self._offset[key]
            if known is None or (offset > known if later else offset < known):
                self._offset[key] = offset
                if heap:
                    self._push_top(key, heap[0][0])
        heapq.heappush(heap, (req.arrival, req.id))
        if heap[0][1] == req.id:
            self._push_top(key, req.arrival)

    def peek(self, waiting: Callable[[str], bool]) -> float | None:
        """The earliest time a request still ``waiting`` is due."""
        top = self._top
        while top:
            at, _, key = top[0]
            heap = self._groups.get(key)
            while heap and not waiting(heap[0][1]):
                heapq.heappop(heap)
            offset = self._offset.get(key)
            if not heap or offset is None:
                heapq.heappop(top)
                if heap is not None and not heap:
                    del self._groups[key], self._offset[key], self._member[key]
                continue
            now_at = heap[0][0] + offset
            if now_at != at:
                heapq.heappop(top)
                self._push_top(key, heap[0][0])
                continue
            return at
        return None

    def pop_due(self, now: float, waiting: Callable[[str], bool]) -> Iterator[str]:
        """The requests due by ``now``, earliest first, each taken out as it is given:
        the caller checks each and puts back (``later``) one not yet due."""
        while (at := self.peek(waiting)) is not None and at <= now:
            key = self._top[0][2]
            heap = self._groups[key]
            _, req_id = heapq.heappop(heap)
            if heap:
                self._push_top(key, heap[0][0])
            yield req_id

    def _push_top(self, key: Hashable, arrival: float) -> None:
        offset = self._offset[key]
        if offset is not None and not math.isnan(at := arrival + offset):
            heapq.heappush(self._top, (at, next(self._seq), key))
