"""The bench's parallel map: worker processes, results in order, one progress bar."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from saber.bench._progress import progress_bar

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

# In a worker process: the function and what every call shares, sent once per process.
_WORKER: list[Any] = []


def _set_up(fn: Callable[[Any, Any], Any], shared: Any) -> None:
    _WORKER[:] = [fn, shared]


def _call(item: Any) -> Any:
    fn, shared = _WORKER
    return fn(shared, item)


def parallel_map(
    fn: Callable[[S, T], R],
    shared: S,
    items: Sequence[T],
    *,
    description: str,
    jobs: int | None = None,
    progress: bool = True,
) -> list[R]:
    """``[fn(shared, item) for item in items]`` in ``jobs`` processes (default: the CPU
    count; 1: in this one); ``fn`` and ``shared`` (picklable) go to each process once.
    The bar advances as each item finishes, in whatever order they finish."""
    jobs = jobs or os.cpu_count() or 1
    with progress_bar(len(items), description, enabled=progress) as advance:
        if jobs == 1:
            out = []
            for item in items:
                out.append(fn(shared, item))
                advance()
            return out
        with ProcessPoolExecutor(jobs, initializer=_set_up, initargs=(fn, shared)) as pool:
            futures = {pool.submit(_call, item): i for i, item in enumerate(items)}
            done: dict[int, R] = {}
            try:
                for future in as_completed(futures):
                    done[futures[future]] = future.result()
                    advance()
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
        return [done[i] for i in range(len(items))]
