"""saber-bench: the paper's experiment on the engine model, in virtual time; the engine
matrix (``run_matrix``: the shipped policy on every engine preset); and the real loop
(``run_real``), one stream replayed against a live engine with and without the gateway.
"""

from saber.bench._grid import PAPER_BATCH_SIZES, PAPER_RPS, Cell, Sweep
from saber.bench._offline import closed_loop_points, fit_variants, profile_engine, saturation_rate
from saber.bench._runner import CellResult, RunStats, run_cell, run_sweep
from saber.bench._summary import Row, WorkloadSummary, summarize_cells, summarize_workloads
from saber.bench.matrix.run import Matrix, MatrixRun, run_matrix
from saber.bench.matrix.summary import MatrixCell, summarize_matrix
from saber.bench.real._run import (
    RealComparison,
    RealRunError,
    RunResult,
    rescale_tasks,
    run_real,
    short_sla_tasks,
)

__all__ = [
    "PAPER_BATCH_SIZES",
    "PAPER_RPS",
    "Cell",
    "CellResult",
    "Matrix",
    "MatrixCell",
    "MatrixRun",
    "RealComparison",
    "RealRunError",
    "Row",
    "RunResult",
    "RunStats",
    "Sweep",
    "WorkloadSummary",
    "closed_loop_points",
    "fit_variants",
    "profile_engine",
    "rescale_tasks",
    "run_cell",
    "run_matrix",
    "run_real",
    "run_sweep",
    "saturation_rate",
    "short_sla_tasks",
    "summarize_cells",
    "summarize_matrix",
    "summarize_workloads",
]
