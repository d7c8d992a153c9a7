"""One progress bar for the bench's long commands, on stderr so stdout stays data."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn


@contextmanager
def progress_bar(
    total: int, description: str, *, enabled: bool = True
) -> Iterator[Callable[[], None]]:
    """Yields ``advance()``, to call once per finished unit of work."""
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
        transient=False,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)
