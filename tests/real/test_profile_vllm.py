"""saber-profile against genuine vLLM (the CPU build, a tiny random model).

Run with ``.venv/bin/pytest -q -m vllm tests/real/test_profile_vllm.py -s``. On two
cores vLLM's speeds measure CPU contention more than batching (docs/real-backends.md),
so this checks the whole run and the file it writes, not the quality of the fit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from real_support import served_profile

from harness import EngineProcess
from saber.profile import points_path, read_points
from saber.profile.cli import main
from saber.speed import load_profile

pytestmark = pytest.mark.vllm


def test_profile_vllm(
    vllm_engine: EngineProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "short.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt_tokens": 16 + i % 17, "output_tokens": 24 + i % 9}) + "\n"
            for i in range(100)
        )
    )
    out = tmp_path / "vllm.json"
    code = main(
        [
            "--base-url", vllm_engine.base_url + "/v1", "--model", vllm_engine.model,
            "--dataset", str(data), "--levels", "1,2,4,8", "--requests-per-level", "8",
            "--out", str(out), "--no-progress",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    with capsys.disabled():
        print("\n" + captured.err + captured.out)
    assert code == 0, captured.err
    assert "ignores ignore_eos" not in captured.err
    profile = load_profile(out)
    assert profile.backend.kind == "vllm" and profile.backend.version
    assert profile.model.name == vllm_engine.model
    assert profile.profiling is not None
    assert profile.profiling.levels == [1, 2, 4, 8] and profile.profiling.lengths == "forced"
    assert profile.ttft_fit is not None
    recorded = read_points(points_path(out))
    # 8 points a level; a level whose rounds disagree is measured again (CPU vLLM's speeds
    # move with whatever else the 2 cores run), and may keep more once a round is left out.
    again = set(profile.profiling.remeasured_levels)
    measured = {level: recorded.measured(level) for level in (1, 2, 4, 8)}
    assert all(n == 8 or (n > 8 and level in again) for level, n in measured.items()), (
        measured,
        again,
    )
    assert all(p.output_tokens == p.max_tokens for p in recorded.points)
    assert out.with_suffix(".png").exists()
    served_profile(vllm_engine, out)  # the gateway starts with it and shows it in use
