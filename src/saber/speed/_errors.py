"""The errors this package raises; all are ValueErrors, and each message says what is wrong."""

from __future__ import annotations


class FitError(ValueError):
    """A speed model could not be fitted to the data given."""


class ParamError(ValueError):
    """A model parameter is missing, unknown or out of its bounds.

    `param` names it and `reason` says what is wrong, so callers such as the
    profile loader can point at the exact field.
    """

    def __init__(self, kind: str, param: str, reason: str) -> None:
        super().__init__(f"{kind} parameter {param}: {reason}")
        self.kind = kind
        self.param = param
        self.reason = reason


class ProfileError(ValueError):
    """A profile file is unreadable or invalid; the message names the file and the field."""
