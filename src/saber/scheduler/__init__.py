"""The admission core: pure, handed ``now``, returns decisions.

The contract: ``request(task, ...)`` builds a request, ``offer(request, now)``,
``poll(now)``, ``progress(id, tokens, now)``, ``finish(id, now, tokens)``,
``cancel(id, now)`` and ``next_wakeup()``; ``Pool`` drives one scheduler per backend
of a pool the same way, each decision naming its backend. ``Policy.from_config`` is the one way
settings become a policy; ``PRESETS`` names the paper's and the default.
"""

from saber.scheduler._core import Observation, Scheduler, SpeedFn, TTFTFn
from saber.scheduler._policy import PRESETS, Policy
from saber.scheduler._request import (
    MAX_TOKENS,
    Action,
    Decision,
    Outcome,
    SchedRequest,
    Tier,
    request_for,
)
from saber.scheduler.lengths._conditioned import Carried
from saber.scheduler.lengths._histogram import LengthEstimate
from saber.scheduler.lengths._task_lengths import TaskLengths
from saber.scheduler.pool._pool import PLACEMENTS, Placed, Placement, Pool
from saber.scheduler.pool._sharing import budget_of, derived_headroom

__all__ = [
    "MAX_TOKENS",
    "PLACEMENTS",
    "PRESETS",
    "Action",
    "Carried",
    "Decision",
    "LengthEstimate",
    "Observation",
    "Outcome",
    "Placed",
    "Placement",
    "Policy",
    "Pool",
    "SchedRequest",
    "Scheduler",
    "SpeedFn",
    "TTFTFn",
    "TaskLengths",
    "Tier",
    "budget_of",
    "derived_headroom",
    "request_for",
]
