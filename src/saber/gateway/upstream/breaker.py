"""A backend's circuit breaker: ejected after failures in a row, probed back in.

Closed, the backend serves. After ``eject_after`` requests in a row that it failed
(unreachable, reset, silent, 5xx) it opens: the pool places nothing new there. After
``eject_s`` one probe (``GET /health``) decides: answered below 500, the breaker
closes; not, it stays open twice as long, up to MAX_BACKOFF times ``eject_s``. Handed
``now``; the probing itself is the caller's.
"""

from __future__ import annotations

import enum

MAX_BACKOFF = 8
"""An ejected backend that keeps failing its probes is probed at least this often
(``eject_s`` times this)."""


class State(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"


class Breaker:
    """Failures in a row and the time of the next probe, for one backend."""

    def __init__(self, eject_after: int, eject_s: float) -> None:
        if eject_after < 1 or not eject_s > 0:
            raise ValueError(f"eject_after {eject_after} must be >= 1, eject_s {eject_s} > 0")
        self.eject_after = eject_after
        self.eject_s = eject_s
        self.state = State.CLOSED
        self.failures = 0  # in a row
        self.ejections = 0  # times it opened
        self.probe_at: float | None = None  # when open
        self._rest = eject_s

    @property
    def open(self) -> bool:
        return self.state is State.OPEN

    def succeeded(self) -> bool:
        """The backend answered a request (below 500). True if that closed the breaker."""
        self.failures = 0
        if self.state is State.CLOSED:
            return False
        self._close()
        return True

    def failed(self, now: float) -> bool:
        """The backend failed a request. True if that opened the breaker."""
        self.failures += 1
        if self.state is State.OPEN or self.failures < self.eject_after:
            return False
        self.state = State.OPEN
        self.ejections += 1
        self._rest = self.eject_s
        self.probe_at = now + self._rest
        return True

    def probed(self, ok: bool, now: float) -> bool:
        """A probe's answer, while open. True if the breaker closed."""
        if self.state is State.CLOSED:
            return False
        if ok:
            self._close()
            return True
        self._rest = min(self._rest * 2, self.eject_s * MAX_BACKOFF)
        self.probe_at = now + self._rest
        return False

    def _close(self) -> None:
        self.state = State.CLOSED
        self.failures = 0
        self.probe_at = None
        self._rest = self.eject_s
