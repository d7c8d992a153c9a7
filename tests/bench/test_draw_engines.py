"""bench/draw_engines.py: engines drawn within the documented ranges, loadable as an
engines file, the same for the same seed; the files checked in are what it draws."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import bench_script
from saber.bench._engines_file import engines_with, load_engines
from saber.engine import PRESETS

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_drawn_engines_load_and_stay_within_the_ranges(tmp_path, capsys):
    draw = bench_script("draw_engines")
    assert draw.main(["--seed", "7", "--count", "12", "--prefix", "t"]) == 0
    path = tmp_path / "engines.yaml"
    path.write_text(capsys.readouterr().out)
    engines = load_engines(path)
    assert list(engines) == [f"t-{i}" for i in range(12)]
    for preset in engines.values():
        hw = preset.hardware
        assert draw.BANDWIDTH_GBS[0] <= hw.memory_bandwidth / 1e9 <= draw.BANDWIDTH_GBS[1]
        assert draw.TFLOPS[0] <= hw.peak_flops / 1e12 <= draw.TFLOPS[1]
        assert draw.MFU[0] <= preset.mfu <= draw.MFU[1]
        assert draw.STEP_OVERHEAD_S[0] <= preset.step_overhead_s <= draw.STEP_OVERHEAD_S[1]
    assert len({p.model.n_params for p in engines.values()}) > 1  # not one model drawn 12 times


def test_the_same_seed_draws_the_same_engines_and_another_seed_others():
    draw = bench_script("draw_engines")
    assert draw.draw(4444, 8, "r44") == draw.draw(4444, 8, "r44")
    assert draw.draw(4444, 8, "r44") != draw.draw(4445, 8, "r44")


@pytest.mark.parametrize(
    ("seed", "prefix"), [(4444, "r44"), (5555, "r55"), (6666, "r66"), (7777, "r77"), (8888, "r88")]
)
def test_the_checked_in_files_are_what_the_script_draws(seed, prefix, capsys):
    draw = bench_script("draw_engines")
    draw.main(["--seed", str(seed), "--count", "8", "--prefix", prefix])
    assert (BENCH / f"random_engines_{seed}.yaml").read_text() == capsys.readouterr().out


def test_engines_with_a_file_are_the_shipped_presets_and_the_files():
    drawn = load_engines(BENCH / "random_engines_8888.yaml")
    assert engines_with(None) == PRESETS
    assert engines_with(BENCH / "random_engines_8888.yaml") == {**PRESETS, **drawn}
    assert set(drawn) == {f"r88-{i}" for i in range(8)}
