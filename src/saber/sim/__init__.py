"""Simulation on the engine model: in virtual time here, in real time in ``saber.sim.http``.

``simulate`` serves a trace on a ``saber.engine.Engine`` in virtual time, either
straight (the static ``max_num_seqs`` baseline) or behind a SABER scheduler;
``simulate_cluster`` serves one on a pool of engine replicas, behind a router
(``ROUTERS``), an admission pool, or several gateways each with its own pool that learn
of each other only by scraping the replicas. ``saber.sim.http`` is saber-sim, an
OpenAI-compatible vLLM stand-in that steps the same engine model on the real clock;
``saber.sim.calibrate`` checks a preset against the paper.
"""

from saber.sim._cluster import simulate_cluster
from saber.sim._cluster_types import AdmissionPool, BackendStats, ClusterResult, GatewayStats
from saber.sim._gateways import SCRAPE_S, gateway_of
from saber.sim._records import SimRecord, SimResult, judged_by
from saber.sim._routers import ROUTERS, BackendView, Router
from saber.sim._virtual import AdmissionScheduler, own_slo, simulate

__all__ = [
    "ROUTERS",
    "SCRAPE_S",
    "AdmissionPool",
    "AdmissionScheduler",
    "BackendStats",
    "BackendView",
    "ClusterResult",
    "GatewayStats",
    "Router",
    "SimRecord",
    "SimResult",
    "gateway_of",
    "judged_by",
    "own_slo",
    "simulate",
    "simulate_cluster",
]
