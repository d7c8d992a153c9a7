"""Help to choose SLOs: the TTFT, TPOT and e2e each task type got at shares of the engine's
capacity (``latency``), and the SLOs suggested from them (``suggest``). Pure functions of a
run's points; saber-profile prints them and keeps the table in the profile."""

from saber.profile.slos.latency import SHARES, latency_table, level_throughputs, share_level
from saber.profile.slos.suggest import (
    MARGIN,
    SHARE,
    STEPS,
    UNNAMED,
    basis,
    met_shares,
    round_up,
    slos_yaml,
    suggest_slos,
)

__all__ = [
    "MARGIN",
    "SHARE",
    "SHARES",
    "STEPS",
    "UNNAMED",
    "basis",
    "latency_table",
    "level_throughputs",
    "met_shares",
    "round_up",
    "share_level",
    "slos_yaml",
    "suggest_slos",
]
