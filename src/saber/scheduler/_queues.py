from __future__ import annotations

import bisect
import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterator

from saber.scheduler._request import Kind, SchedRequest


class TaskQueues:
    """FIFO queues keyed by task type, with O(1) removal from anywhere.

    Requests of one task arrive in deadline order, so each task's queue is
    ordered by (arrival, id); ``front`` merges the task queues lazily to find the
    oldest requests overall. ``most_urgent_passing`` finds the request with the
    earliest deadline among those that can be admitted, in O(groups x log n):
    within a group of requests of one kind (task, length, cap, floor), the ones
    that can are exactly those with a late enough deadline.
    """

    def __init__(self) -> None:
        self._by_task: dict[str, OrderedDict[str, SchedRequest]] = {}
        self._where: dict[str, str] = {}
        # A kind of request (``SchedRequest.kind``) -> deadlines in order, and the ids in
        # the same order.
        self._groups: dict[Kind, tuple[list[float], list[str]]] = {}
        self.version = 0  # moves with every push and removal

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, req_id: object) -> bool:
        return req_id in self._where

    def push(self, req: SchedRequest) -> None:
        self.version += 1
        queue = self._by_task.setdefault(req.task, OrderedDict())
        queue[req.id] = req
        # A request can be offered after one that arrived later (its body took longer
        # to read): move those behind it, so that each queue stays in (arrival, id)
        # order, the order ``front`` merges by. Ties are common (uvloop's clock moves
        # in milliseconds, once per loop iteration); the gateway's ids sort in
        # arrival order, so they break them.
        later = []
        for other in itertools.islice(reversed(queue.values()), 1, None):
            if (other.arrival, other.id) <= (req.arrival, req.id):
                break
            later.append(other.id)
        for req_id in reversed(later):
            queue.move_to_end(req_id)
        self._where[req.id] = req.task
        deadlines, ids = self._groups.setdefault(req.kind, ([], []))
        i = bisect.bisect_right(deadlines, req.due)  # the end, but for a tie
        deadlines.insert(i, req.due)
        ids.insert(i, req.id)

    def remove(self, req_id: str) -> SchedRequest | None:
        task = self._where.pop(req_id, None)
        if task is None:
            return None
        self.version += 1
        req = self._by_task[task].pop(req_id)
        key = req.kind
        deadlines, ids = self._groups[key]
        i = bisect.bisect_left(deadlines, req.due)
        while ids[i] != req_id:
            i += 1
        del deadlines[i], ids[i]
        if not ids:
            del self._groups[key]
        return req

    def most_urgent_passing(self, earliest: Callable[[SchedRequest], float]) -> SchedRequest | None:
        """The waiting request with the earliest ``due`` among those that pass:
        ``earliest(req)`` is the earliest ``due`` with which a request of ``req``'s kind
        would pass now (one call per kind). None if none passes."""
        best: tuple[float, str] | None = None
        for deadlines, ids in self._groups.values():
            first = self.get(ids[0])
            assert first is not None
            i = bisect.bisect_left(deadlines, earliest(first))
            if i < len(ids) and (best is None or deadlines[i] < best[0]):
                best = (deadlines[i], ids[i])
        return None if best is None else self.get(best[1])

    def ahead_of(self, task: str) -> int | None:
        """How many waiting requests are due before ``task``'s most urgent one; None
        when none of ``task`` waits."""
        queue = self._by_task.get(task)
        if not queue:
            return None
        due = min(r.due for r in queue.values())
        return sum(bisect.bisect_left(deadlines, due) for deadlines, _ in self._groups.values())

    def oldest_of(self, task: str) -> SchedRequest | None:
        queue = self._by_task.get(task)
        return next(iter(queue.values())) if queue else None

    def latest_of_each_kind(self) -> Iterator[SchedRequest]:
        """The request with the latest deadline of each kind."""
        for _, ids in self._groups.values():
            req = self.get(ids[-1])
            assert req is not None
            yield req

    def get(self, req_id: str) -> SchedRequest | None:
        task = self._where.get(req_id)
        return None if task is None else self._by_task[task][req_id]

    def depth(self, task: str) -> int:
        queue = self._by_task.get(task)
        return len(queue) if queue else 0

    def tasks(self) -> list[str]:
        return list(self._by_task)

    def front(self, n: int) -> list[SchedRequest]:
        """The ``n`` oldest requests across all task queues."""
        if len(self._by_task) == 1:
            (queue,) = self._by_task.values()
            return list(itertools.islice(queue.values(), n))
        streams = [iter(q.values()) for q in self._by_task.values() if q]
        merged = heapq.merge(*streams, key=lambda r: (r.arrival, r.id))
        return list(itertools.islice(merged, n))

    def __iter__(self) -> Iterator[SchedRequest]:
        for queue in self._by_task.values():
            yield from queue.values()
