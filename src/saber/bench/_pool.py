"""The bench's parallel map: worker processes, results in order, one progress bar."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from saber.bench._progress import progress_bar

T = TypeVar("T")
R = TypeVar("R")


def parallel_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    description: str,
    jobs: int | None = None,
    progress: bool = True,
    init: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
) -> list[R]:
    """``[fn(item) for item in items]`` in ``jobs`` processes (default: the CPU count;
    1: in this one), each set up once by ``init(*initargs)``. The bar advances as
    each item finishes, in whatever order they finish."""
    jobs = jobs or os.cpu_count() or 1
    with progress_bar(len(items), description, enabled=progress) as advance:
        if jobs == 1:
            if init is not None:
                init(*initargs)
            out = []
            for item in items:
                out.append(fn(item))
                advance()
            return out
        with ProcessPoolExecutor(jobs, initializer=init, initargs=initargs) as pool:
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
            done: dict[int, R] = {}
            try:
                for future in as_completed(futures):
                    done[futures[future]] = future.result()
                    advance()
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
        return [done[i] for i in range(len(items))]
