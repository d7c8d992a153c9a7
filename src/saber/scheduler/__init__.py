"""The admission core: pure, handed ``now``, returns decisions.

The contract: ``offer(request, now)``, ``poll(now)``, ``finish(id, now)``,
``cancel(id, now)`` and ``next_wakeup()``. ``request_for`` is the one way a
request becomes a ``SchedRequest``; ``Policy.from_config`` the one way settings
become a policy.
"""

from saber.scheduler._core import Policy, Scheduler, SpeedFn
from saber.scheduler._estimate import expected_tokens
from saber.scheduler._outcome import Outcome
from saber.scheduler._request import (
    MAX_TOKENS,
    Action,
    Decision,
    SchedRequest,
    Tier,
    request_for,
)

__all__ = [
    "MAX_TOKENS",
    "Action",
    "Decision",
    "Outcome",
    "Policy",
    "SchedRequest",
    "Scheduler",
    "SpeedFn",
    "Tier",
    "expected_tokens",
    "request_for",
]
