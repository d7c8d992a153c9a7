"""saber-bench: the paper's experiment on the engine model, in virtual time."""

from saber.bench._grid import PAPER_BATCH_SIZES, PAPER_RPS, Cell, Sweep
from saber.bench._offline import closed_loop_points, fit_variants, profile_engine
from saber.bench._runner import CellResult, RunStats, run_cell, run_sweep
from saber.bench._summary import Row, WorkloadSummary, summarize_cells, summarize_workloads

__all__ = [
    "PAPER_BATCH_SIZES",
    "PAPER_RPS",
    "Cell",
    "CellResult",
    "Row",
    "RunStats",
    "Sweep",
    "WorkloadSummary",
    "closed_loop_points",
    "fit_variants",
    "profile_engine",
    "run_cell",
    "run_sweep",
    "summarize_cells",
    "summarize_workloads",
]
