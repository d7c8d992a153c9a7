"""Over HTTP, saber-sim decodes as fast as the engine model predicts for the same load.

The server runs in its own process (the measuring client must not share its
GIL) at a time scale that keeps a step (7.5 ms of engine time alone, 25 ms with
64 requests, for the paper preset) milliseconds long on the wall, above
event-loop and scheduler jitter.

On a busy machine a measurement is noisy either way: a stall the sim's driver
cannot catch up (over its resync bound) slows the decode, and a client that reads
its first frame late sees the rest in a burst, a fast decode. Such noise comes and
goes; a sim that decodes at the wrong speed does so every time. So a level is
measured again (at most ``RUNS`` times) only while it is outside the tolerance,
and it fails when every run was.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from saber.sim.http import SimSettings
from saber.sim.http.fidelity import compare, measure, predict

TIME_SCALE = 2.0
TOLERANCE = 0.15
RUNS = 3
PROMPT_TOKENS = 32
OUTPUT_TOKENS = 100


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "saber.sim.http", "--port", "0", "--time-scale", str(TIME_SCALE),
         "--disable-uvicorn-access-log"],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    drain = threading.Thread(target=proc.stderr.read, daemon=True)
    try:
        for line in proc.stderr:
            m = re.search(r"running on (http://\S+)", line)
            if m:
                break
        else:
            pytest.fail("saber-sim did not start")
        # Keep draining its log so that a full pipe never blocks it.
        drain.start()
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if drain.is_alive():
            drain.join(timeout=5)
        proc.stderr.close()


@pytest.mark.slow
@pytest.mark.parametrize("concurrency", [1, 4, 16, 64])
def test_decode_speed_matches_the_engine_model(server_url: str, concurrency: int) -> None:
    settings = SimSettings(time_scale=TIME_SCALE)
    predicted = predict(
        settings, concurrency, prompt_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS
    )
    runs = []
    for _ in range(RUNS):
        measured = asyncio.run(
            measure(
                server_url,
                settings.model_name,
                concurrency,
                prompt_tokens=PROMPT_TOKENS,
                output_tokens=OUTPUT_TOKENS,
                time_scale=TIME_SCALE,
            )
        )
        runs.append(compare(predicted, measured, concurrency))
        if abs(runs[-1].error) <= TOLERANCE:
            return
    pytest.fail(f"outside ±{TOLERANCE:.0%} in all {RUNS} runs: {runs}")
