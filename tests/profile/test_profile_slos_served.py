"""saber-profile's suggested SLOs on saber-sim, put to use (issue 47, item 4): a quick
profile of two task types writes them (``--suggest-slos``), a gateway whose task types take
them serves requests of both through the ``openai`` SDK, and /metrics counts each request
by every part suggested. The quick levels are shortened (``QUICK_LEVEL_S``, three levels:
12 s); the llama.cpp tier runs the same with the real ones (tests/real/test_slos_llamacpp.py).

saber-sim (paper preset, real time) and the gateway run in processes of their own, so the
latencies profiled are the engine's, not this interpreter's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from profile_support import run_cli

import saber.profile.run as run_module
from harness import (
    EngineProcess,
    assert_counted_by_part,
    config_with_slos,
    counted_by_part,
    free_port,
    gateway_process,
    read_suggestions,
    serve_each_task,
    two_task_dataset,
)
from saber.speed import load_profile

MODEL = "qwen-coder"
LEVEL_S = 2.0  # 2, 4 and 6 s at loads 1, 4 and 16
REQUESTS = 4  # of each task type, one at a time


@pytest.mark.slow
def test_the_suggested_slos_are_printed_and_a_gateway_counts_requests_by_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_module, "QUICK_LEVEL_S", LEVEL_S)
    port = free_port()
    argv = [
        sys.executable, "-m", "saber.sim.http", "--host", "127.0.0.1", "--port", str(port),
        "--preset", "paper", "--served-model-name", MODEL, "--disable-uvicorn-access-log",
    ]  # fmt: skip
    out, slos = tmp_path / "sim.json", tmp_path / "slos.yaml"
    with EngineProcess("saber-sim", argv, port=port, model=MODEL) as sim:
        code, stdout, err = run_cli(
            ["--base-url", sim.base_url, "--model", MODEL, "--quick", "--levels", "1,4,16",
             "--dataset", str(two_task_dataset(tmp_path / "two.jsonl")),
             "--out", str(out), "--no-plot", "--suggest-slos", str(slos)],
            capsys,
        )  # fmt: skip
        with capsys.disabled():
            print("\n" + stdout[stdout.index(" Latency at shares") :])
        assert code == 0, err
        # Printed, written, and kept in the profile.
        assert "Suggested SLOs: 2 x p90 at 3/4 of capacity" in stdout
        assert f"wrote {slos}" in stdout
        suggested = read_suggestions(slos)
        assert set(suggested) == {"code_qna", "code_completion"}
        assert all(set(parts) == {"ttft_s", "tpot_s", "e2e_s"} for parts in suggested.values())
        profiling = load_profile(out).profiling
        assert profiling is not None and profiling.latencies is not None
        basis = {r.task: r for r in profiling.latencies.rows if r.share == 0.75}
        for task, parts in suggested.items():  # twice each p90, rounded up by a third at most
            for part, limit in parts.items():
                p90 = getattr(basis[task], part.replace("_s", "_p90_s"))
                assert 2 * p90 <= limit <= 2 * p90 * 4 / 3, (task, part, p90, limit)

        # A gateway whose code_qna and code_completion take them.
        config = config_with_slos(suggested, tmp_path / "gateway.yaml")
        gateway = gateway_process(
            model=MODEL, backend=sim.base_url, profile=out, config=config, clean_env=True
        )
        with gateway:
            serve_each_task(gateway.base_url, REQUESTS)
            counts = counted_by_part(gateway.base_url, suggested, REQUESTS)
    with capsys.disabled():
        print(f"saber_slo_requests_total by task and part (met, missed): {counts}")
    assert_counted_by_part(counts, REQUESTS)
