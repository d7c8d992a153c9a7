"""The one error saber-profile reports to the operator: a line, then exit code 2."""

from __future__ import annotations


class ProfileRunError(Exception):
    """Profiling cannot go on: the backend is unreachable, the model is not served, ...

    The message is one line that says what is wrong and, where it can, what to do;
    the CLI prints it without a traceback and exits with code 2.
    """
