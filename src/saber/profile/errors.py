"""How a profiling run stops early: an error for the operator, or Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from saber.speed import Profile


class ProfileRunError(Exception):
    """Profiling cannot go on: the backend is unreachable, the model is not served, ...

    The message is one line that says what is wrong and, where it can, what to do;
    the CLI prints it without a traceback and exits with code 2.
    """


class ProfileInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the run. The points so far are kept in ``points``: ``profile`` is the
    one written from the ``kept`` counted ones, or None when they could not be fitted
    (``reason`` says why). ``resume`` continues the run."""

    def __init__(
        self, profile: Profile | None, points: Path, kept: int, reason: str | None = None
    ) -> None:
        super().__init__(f"interrupted: {kept} points kept in {points}")
        self.profile, self.points, self.kept, self.reason = profile, points, kept, reason
