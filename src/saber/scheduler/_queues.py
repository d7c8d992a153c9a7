from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Iterator

from saber.scheduler._request import SchedRequest


class TaskQueues:
    """FIFO queues keyed by task type, with O(1) removal from anywhere.

    Requests of one task arrive in deadline order, so each task's queue is
    ordered by arrival; ``front`` merges the task queues lazily to find the
    oldest requests overall.
    """

    def __init__(self) -> None:
        self._by_task: dict[str, OrderedDict[str, SchedRequest]] = {}
        self._where: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, req_id: object) -> bool:
        return req_id in self._where

    def push(self, req: SchedRequest) -> None:
        self._by_task.setdefault(req.task, OrderedDict())[req.id] = req
        self._where[req.id] = req.task

    def remove(self, req_id: str) -> SchedRequest | None:
        task = self._where.pop(req_id, None)
        if task is None:
            return None
        return self._by_task[task].pop(req_id)

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

    def popleft(self) -> SchedRequest | None:
        """Remove and return the oldest request overall."""
        head = self.front(1)
        if not head:
            return None
        return self.remove(head[0].id)

    def __iter__(self) -> Iterator[SchedRequest]:
        for queue in self._by_task.values():
            yield from queue.values()
