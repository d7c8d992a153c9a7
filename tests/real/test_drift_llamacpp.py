"""The gateway's speed curve follows a real engine that becomes slower in mid-run.

llama-server is profiled (``saber.profile.profile_backend``), a gateway starts with that
profile and refits f(L) on a short window, and closed-loop traffic at 1, 2, 4 and 8
clients goes through it. Then the engine is stopped and started again on the same port
with a model twice as deep: the same name, about half the speed. The same traffic goes
on. The gateway must swap its curve (counted, and logged with both curves), and then
predict the speed that requests get within 10% (the median of observed over predicted
speed, over at least half a cycle of requests finished since its last swap: a second
swap may follow the first as the refit window fills with the slower engine's requests).

Why a deeper model and not fewer threads: the engine runs one thread (see
``harness.start_llamacpp``), and on these 2 cores two threads are slower than one, not
faster. A model twice as deep halves the speed in a fixed proportion, run after run.

Run with ``.venv/bin/pytest -q -m llamacpp tests/real/test_drift_llamacpp.py -s`` to see
the figures.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from test_profile_llamacpp import short_dataset

from harness import EngineGateway, scrape, start_gateway, start_llamacpp
from harness._gguf import LAYERS
from saber.profile import profile_backend

pytestmark = pytest.mark.llamacpp

CLIENTS = (1, 2, 4, 8)  # one closed loop each, in turn: four distinct loads for the fit
PER_CLIENT = 6  # requests each client sends at each level: 90 per cycle
CYCLE = PER_CLIENT * sum(CLIENTS)
MAX_CYCLES = 4  # the bound on each wait after the restart (a cycle takes about 20 s)
SETTLING = ("swaps", "observed_since_swap", "observed_over_predicted")
TOKENS = 96
# A refit on the last cycle, considered every second once a third of a cycle is new.
REFIT = {
    "refit.interval_s": 1.0,
    "refit.window": CYCLE,
    "refit.min_points": CYCLE * 2 // 3,
    "refit.every": CYCLE // 3,
}


def cycle(gateway: EngineGateway) -> None:
    """One cycle of closed-loop traffic: each level of CLIENTS in turn, every request a
    96-token answer of a task with room in its SLA (code_translation: 12 s)."""

    def client(_: int) -> None:
        with httpx.Client(base_url=gateway.url, timeout=120.0) as http:
            for _ in range(PER_CLIENT):
                resp = http.post(
                    "/v1/completions",
                    json={
                        "model": gateway.engine.model,
                        "prompt": "def parse(text):\n    " * 4,
                        "max_tokens": TOKENS,
                        "ignore_eos": True,
                    },
                    headers={"x-saber-task": "code_translation"},
                )
                assert resp.status_code == 200, resp.text
                assert resp.json()["usage"]["completion_tokens"] == TOKENS

    for n in CLIENTS:
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(client, range(n)))


def learning(gateway: EngineGateway) -> dict:
    resp = httpx.get(gateway.url + "/saber/status", timeout=10.0)
    resp.raise_for_status()
    return resp.json()["learning"]


def swaps(gateway: EngineGateway) -> float:
    return scrape(gateway.url, "saber_speed_refits_total", result="swapped")


def test_the_curve_follows_an_engine_restarted_slower(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = start_llamacpp(parallel=8, ctx=8192)
    gateway = None
    try:
        profile = tmp_path / "profile.json"
        profile_backend(
            engine.base_url,
            engine.model,
            profile,
            dataset=short_dataset(tmp_path / "short.jsonl"),
            levels=(1, 2, 4, 8),
            requests_per_level=12,
            rounds=3,
        )
        gateway = start_gateway(engine, profile, **REFIT)
        cycle(gateway)
        before = learning(gateway)
        swaps_before = swaps(gateway)

        engine.stop()
        engine = start_llamacpp(parallel=8, ctx=8192, layers=2 * LAYERS, port=engine.port)
        cycles = 0
        while swaps(gateway) == swaps_before and cycles < MAX_CYCLES:
            cycle(gateway)
            cycles += 1
        swapped = learning(gateway)
        if swapped["swaps"] == swaps_before:
            raise AssertionError(
                f"the gateway kept the old curve for {MAX_CYCLES} cycles after the restart: "
                f"before it {before}, now {swapped}"
            )
        # Then serve a cycle on the new curve, and more until the curve in use has been
        # judged on half a cycle of requests: a refit may swap again as the window fills
        # with the slower engine's requests, which starts that count again.
        after, settling = swapped, []
        while not settling or after["observed_since_swap"] < CYCLE // 2:
            if len(settling) == MAX_CYCLES:
                raise AssertionError(
                    f"after {MAX_CYCLES} cycles past the first swap, fewer than {CYCLE // 2} "
                    f"requests since the last swap; after each cycle: {settling}; "
                    f"before the restart: {before}"
                )
            cycle(gateway)
            after = learning(gateway)
            settling.append({k: after[k] for k in SETTLING})
        log = gateway.process.log_path.read_text()
    finally:
        if gateway is not None:
            gateway.stop()
        engine.stop()

    swap_lines = [json.loads(line) for line in log.splitlines() if "speed model swapped" in line]
    restarted = swap_lines[int(swaps_before) :]  # the swaps after the restart
    with capsys.disabled():
        print(
            f"\nbefore the restart: observed/profile {before['observed_over_profile']}, "
            f"observed/predicted {before['observed_over_predicted']}, swaps {swaps_before:.0f}"
        )
        print(f"after the restart, {cycles} cycle(s) to the first swap; swaps:")
        for line in restarted:
            print(
                f"  departure {line['departure']}, f(1) {line['f1_old']} -> {line['f1_new']}, "
                f"{line['kind']} {line['new_params']}"
            )
        print(f"then {len(settling)} cycle(s) until {CYCLE // 2} requests since the last swap:")
        for figures in settling:
            print(f"  {figures}")
        print(
            f"after the last swap ({after['observed_since_swap']} requests): observed/profile "
            f"{after['observed_over_profile']} (must be < 0.8), observed/predicted "
            f"{after['observed_over_predicted']} (must be within 0.10 of 1)"
        )
    # The curve in use at the end (the last swap's) is the slower engine's. The first swap
    # after the restart is fitted on a window still two-thirds the old engine's, so it
    # moves only part of the way (seen: f(1) 114.3 -> 94.3, then 43.6, then 53.7).
    assert restarted and restarted[-1]["f1_new"] < 0.8 * restarted[0]["f1_old"]
    # The profile no longer describes the engine, and the gateway knows it ...
    assert after["observed_over_profile"] < 0.8
    # ... while what it predicts for each request is again within 10%.
    assert abs(after["observed_over_predicted"] - 1.0) < 0.10
