"""Simulation: the virtual-time simulator (and, later, saber-sim, an HTTP vLLM stand-in).

``simulate`` serves a trace on an ``saber.engine.Engine`` in virtual time, either
straight (the static ``max_num_seqs`` baseline) or behind a SABER scheduler.
"""

from saber.sim._records import SimRecord, SimResult
from saber.sim._virtual import AdmissionScheduler, simulate

__all__ = ["AdmissionScheduler", "SimRecord", "SimResult", "simulate"]
