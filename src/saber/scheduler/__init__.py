"""The admission core: pure, handed ``now``, returns decisions.

The contract: ``offer(request, now)``, ``poll(now)``, ``finish(id, now)``,
``cancel(id, now)``, ``fail(id, now)`` and ``next_wakeup()``.
"""

from saber.scheduler._core import Policy, Scheduler, SpeedFn
from saber.scheduler._estimate import expected_tokens
from saber.scheduler._request import Action, Decision, Outcome, SchedRequest, Tier

__all__ = [
    "Action",
    "Decision",
    "Outcome",
    "Policy",
    "SchedRequest",
    "Scheduler",
    "SpeedFn",
    "Tier",
    "expected_tokens",
]
