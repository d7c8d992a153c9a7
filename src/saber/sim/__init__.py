"""Simulation on the engine model: in virtual time here, in real time in ``saber.sim.http``.

``simulate`` serves a trace on a ``saber.engine.Engine`` in virtual time, either
straight (the static ``max_num_seqs`` baseline) or behind a SABER scheduler.
``saber.sim.http`` is saber-sim, an OpenAI-compatible vLLM stand-in that steps the
same engine model on the real clock; ``saber.sim.calibrate`` checks a preset against
the paper.
"""

from saber.sim._records import SimRecord, SimResult
from saber.sim._virtual import AdmissionScheduler, simulate

__all__ = ["AdmissionScheduler", "SimRecord", "SimResult", "simulate"]
