"""Admission over several backends, one ``Scheduler`` each (``Pool``), and what they
share out besides requests: sessions kept on one backend, and behind several gateways
the budgets and headroom each keeps for the others'."""

from saber.scheduler.pool._pool import PLACEMENTS, Placed, Placement, Pool
from saber.scheduler.pool._sharing import budget_of, derived_headroom

__all__ = ["PLACEMENTS", "Placed", "Placement", "Pool", "budget_of", "derived_headroom"]
