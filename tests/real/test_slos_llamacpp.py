"""saber-profile's suggested SLOs on genuine llama.cpp (issue 47, item 4): a quick profile
of two task types (code_qna and code_completion, forced lengths) prints the latency table
and the suggestions and writes them (``--suggest-slos``); a gateway whose two task types
take them serves requests of both through the ``openai`` SDK, and /metrics counts each
request by every part suggested. The same as tests/profile/test_profile_slos_served.py on
saber-sim, with the quick run's own level times.

Run with ``.venv/bin/pytest -q -m llamacpp tests/real/test_slos_llamacpp.py -s``: about
2 min (1 min 48 s of levels).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import (
    EngineProcess,
    assert_counted_by_part,
    config_with_slos,
    counted_by_part,
    read_suggestions,
    serve_each_task,
    start_gateway,
    two_task_dataset,
)
from saber.profile.cli import main
from saber.speed import load_profile

pytestmark = pytest.mark.llamacpp

# llama-server runs 32 slots (-np 32): every level up to them, none waits.
LEVELS = "1,2,4,8,16,32"
REQUESTS = 4  # of each task type, one at a time
# As tests/conftest.py's gateways: a busy 2-core machine is slow to connect and to read.
OVERRIDES = {
    "backend.read_timeout_s": 120.0,
    "backend.connect_timeout_s": 30.0,
    "backend.metrics_interval_s": 5.0,
}


def test_suggested_slos_on_llamacpp(
    llamacpp_engine: EngineProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, slos = tmp_path / "llamacpp.json", tmp_path / "slos.yaml"
    code = main(
        ["--base-url", llamacpp_engine.base_url, "--model", llamacpp_engine.model, "--quick",
         "--levels", LEVELS, "--dataset", str(two_task_dataset(tmp_path / "two.jsonl")),
         "--out", str(out), "--no-plot", "--suggest-slos", str(slos), "--no-progress"]
    )  # fmt: skip
    captured = capsys.readouterr()
    with capsys.disabled():
        print("\n" + captured.err + captured.out)
    assert code == 0, captured.err
    assert "Suggested SLOs: 2 x p90 at 3/4 of capacity" in captured.out
    suggested = read_suggestions(slos)
    assert set(suggested) == {"code_qna", "code_completion"}
    assert all(set(parts) == {"ttft_s", "tpot_s", "e2e_s"} for parts in suggested.values())
    profile = load_profile(out)
    assert profile.backend.kind == "llamacpp"
    assert profile.profiling is not None and profile.profiling.latencies is not None

    config = config_with_slos(suggested, tmp_path / "gateway.yaml")
    gw = start_gateway(llamacpp_engine, out, config=config, **OVERRIDES)
    try:
        serve_each_task(gw.url, REQUESTS)
        counts = counted_by_part(gw.url, suggested, REQUESTS)
    finally:
        gw.stop()
    with capsys.disabled():
        print(f"saber_slo_requests_total by task and part (met, missed): {counts}")
    assert_counted_by_part(counts, REQUESTS)
