"""The real loop on genuine llama.cpp: saber-profile fits the engine, a gateway starts with
that profile, and one seeded Poisson stream above capacity goes through the gateway and
straight to the engine (``harness.real_loop``, as ``bench/real_loop.py`` runs it).

The gateway must keep fewer requests in flight at the engine, and meet the SLA of a
larger share of the short-SLA requests (code_qna, code_summary). Run with
``.venv/bin/pytest -q -m llamacpp tests/real/test_real_loop_llamacpp.py -s`` to see
the figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import REAL_LOOP_TIMEOUT_S, EngineProcess, real_loop, start_llamacpp

pytestmark = pytest.mark.llamacpp


@pytest.fixture(scope="module")
def roomy_engine() -> Iterator[EngineProcess]:
    """32 slots of 2,048 positions: the longest request of the mix fits in any slot."""
    engine = start_llamacpp(parallel=32, ctx=65536)
    yield engine
    engine.stop()


def test_gateway_beats_the_bare_engine_above_capacity(
    roomy_engine: EngineProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seed 0, 100 requests at 4x the measured capacity. At 2.5x this test passed five
    times (short-SLA margin +4.1 to +18.7 points) and failed once: the bare engine then
    held 18.7 on average, within what the SLAs tolerate, and met 85% (the gateway 79%).
    At 4x the bare engine holds 29-32 on average (peak 62-66), the gateway 16-18, and
    the margin was +6.2 to +22.9 points in the seven runs of docs/real-loop.md."""
    report = real_loop(roomy_engine, tmp_path)
    direct, gateway = report.summary("direct"), report.summary("gateway")
    runs = {run.name: run.served for run in report.real.runs}
    errors = {name: [s.error for s in served if s.error] for name, served in runs.items()}
    with capsys.disabled():
        print(
            f"\nprofile {report.profile.kind} {report.profile.params} R^2={report.profile.r2:.3f}; "
            f"capacity {report.capacity_rps:.2f} req/s, sent {report.rps:.2f} req/s"
        )
        for s in (direct, gateway):
            print(
                f"{s['run']:8s} in flight mean {s['engine_in_flight_mean']:.1f} "
                f"max {s['engine_in_flight_max']:.0f}; short-SLA goodput "
                f"{s['short_sla_goodput']:.1%}; goodput {s['goodput']:.1%}; errors {s['errors']} "
                f"{sorted(set(errors[s['run']]))[:3]}; slowest answer "
                f"{max(x.latency_s or 0.0 for x in runs[s['run']]):.0f} s of the client's "
                f"{REAL_LOOP_TIMEOUT_S:.0f} s; {s['duration_s']:.0f} s"
            )
        print(
            "gateway's margins: in flight mean "
            f"{direct['engine_in_flight_mean'] - gateway['engine_in_flight_mean']:+.1f}, "
            f"max {direct['engine_in_flight_max'] - gateway['engine_in_flight_max']:+.0f}; "
            "short-SLA goodput "
            f"{100 * (gateway['short_sla_goodput'] - direct['short_sla_goodput']):+.1f} points"
        )
    assert report.real.short_sla_tasks == {"code_qna", "code_summary"}
    assert direct["requests"] == gateway["requests"] == 100
    assert direct["samples"] > 20 and gateway["samples"] > 20
    # Above capacity the bare engine takes everything in: past its 32 slots, requests
    # wait inside it, and everything slows down.
    assert direct["engine_in_flight_max"] > 32
    assert gateway["engine_in_flight_mean"] < direct["engine_in_flight_mean"]
    assert gateway["engine_in_flight_max"] < direct["engine_in_flight_max"]
    assert gateway["short_sla_goodput"] > direct["short_sla_goodput"]
    # Every request through the gateway was answered, but those it refused because they
    # could no longer be answered while still useful to their client (useful_s). The bare
    # engine's run is measured, not judged: at 4x capacity some of its requests may outlast
    # the client's timeout, and count as missed SLAs in its goodput (printed above).
    others = [e for e in errors["gateway"] if "(useful_s)" not in e]
    assert not others, "gateway errors other than useful_s refusals:\n" + "\n".join(others)
