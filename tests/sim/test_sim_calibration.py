"""The ``paper`` preset keeps reproducing Table I and the paper's static-B picture."""

from __future__ import annotations

from saber.engine import get_preset
from saber.sim.calibrate import completion_table, goodput_grid

PAPER = get_preset("paper")


def test_paper_preset_reproduces_table_one_slas_within_20_percent():
    rows = completion_table(PAPER)  # W3, 10 RPS, static 50, 100 requests x 20 seeds
    assert {r.task for r in rows} == {
        "code_qna",
        "code_generation",
        "code_summary",
        "code_translation",
    }
    for row in rows:
        assert abs(row.error) <= 0.2, row


def test_heavy_mix_at_high_load_punishes_a_large_static_batch():
    grid = goodput_grid(PAPER, workload="W1", rps_values=[15, 20], batches=[30, 100])
    for rps in (15, 20):
        assert grid[rps, 100] < 0.7 * grid[rps, 30], grid


def test_light_load_serves_nearly_everyone_at_any_reasonable_batch():
    grid = goodput_grid(PAPER, workload="W2", rps_values=[10], batches=[30, 100])
    assert min(grid.values()) > 0.85
