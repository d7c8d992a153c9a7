"""bench/soak.py for 30 seconds (the 10-minute run is the bench's default): twice the
capacity, hang-ups, backend errors and stalls, the backend killed and restarted twice,
one SIGHUP reload; nothing lost, nothing left in flight, no descriptor leaked."""

from __future__ import annotations

import pytest

from harness import bench_script


@pytest.mark.slow
def test_soak_30_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    soak = bench_script("soak")
    plan = soak.Plan(
        duration_s=30.0,
        time_scale=1.0,
        max_concurrency=8,
        overload=2.0,
        disconnect=0.05,
        error_rate=0.02,
        stall_prob=0.01,
        seed=1,
        warmup_s=6.0,
    )
    result = soak.run(plan)
    with capsys.disabled():
        print("\n" + soak.report(result))
    assert result["lost"] == 0, result
    assert result["in_flight_end"] == 0
    assert result["fds"]["end"] <= result["fds"]["start"]
    assert result["rss_mb"]["end"] <= result["rss_mb"]["start"] * 1.15
    assert len(result["events"]) == 3 and result["reloaded"] == 1
    assert result["gateway_errors"] == 0
    by = result["by_outcome"]
    for outcome in ("served", "backend_unavailable", "backend_error"):
        assert by.get(outcome, 0) > 0, by
    assert by.get("rejected_queue_full", 0) + by.get("rejected_expired", 0) > 0  # overload
    assert by.get("cancelled_queued", 0) + by.get("cancelled_running", 0) > 0
    assert result["client"].get("stream cut", 0) == 0
    assert not any(k.startswith("client error") for k in result["client"])
