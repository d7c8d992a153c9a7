"""Issue 21 at the gateway: the learned calibration had fallen to a third (the engine
seemed slow while busy), a burst of code_qna streams was demoted on arrival, and the
demoted ones waited while nothing ran until they expired. Now every request is
answered, and every demoted one is served."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from gateway_support import GatewayFactory, call_in_loop

from harness import metric_value
from saber.config import DEFAULT_PROFILE_DIR
from saber.gateway import RunningGateway
from saber.sim.http import RunningSim, serve_in_thread
from saber.workload import make_prompt

STREAMS = 300
QUEUE_CAP = 50
BURST_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def profile_path() -> Path:
    """The shipped profile, which describes saber-sim at real speed."""
    return DEFAULT_PROFILE_DIR / "saber-sim-paper.json"


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    """saber-sim at real speed, which the shipped profile describes."""
    with serve_in_thread(time_scale=1.0, max_num_seqs=256) as running:
        yield running


async def one(api: openai.AsyncOpenAI, model: str, prompt: str) -> tuple[str, list[str]]:
    """How one stream ended: ("stream", its lines) or ("http <status>", [])."""
    try:
        async with api.chat.completions.with_streaming_response.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            stream=True,
            extra_headers={"x-saber-task": "code_qna"},
        ) as resp:
            return "stream", [line async for line in resp.iter_lines()]
    except openai.APIStatusError as exc:
        return f"http {exc.status_code}", [exc.response.headers.get("retry-after", "")]


async def burst(gw: RunningGateway, model: str) -> list[tuple[str, list[str]]]:
    api = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0, timeout=120)
    prompt = make_prompt("code_qna", 186)
    try:
        calls = [one(api, model, prompt) for _ in range(STREAMS)]
        return await asyncio.wait_for(asyncio.gather(*calls), BURST_TIMEOUT_S)
    finally:
        await api.close()


def ended_normally(lines: list[str]) -> bool:
    """A stream that ends with a finished choice and [DONE], and no error event."""
    data = [line[6:] for line in lines if line.startswith("data: ")]
    chunks = [json.loads(d) for d in data[:-1]]
    finished = any(
        c.get("finish_reason") in ("stop", "length") for k in chunks for c in k.get("choices", [])
    )
    errors = any("error" in k for k in chunks)
    return bool(data) and data[-1] == "[DONE]" and finished and not errors


@pytest.mark.slow
def test_a_burst_under_a_low_calibration_serves_every_demoted_request(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(sim.url, queue_cap=QUEUE_CAP, queued_comment_interval_s=0.25)
    call_in_loop(gw, lambda: gw.gateway.scheduler.set_calibration(0.324))
    results = asyncio.run(burst(gw, sim.model))

    how = Counter(kind for kind, _ in results)
    assert set(how) <= {"stream", "http 429"}, how
    streams = [lines for kind, lines in results if kind == "stream"]
    queued = [lines for lines in streams if ": queued" in lines]
    broken = [lines[-4:] for lines in streams if not ended_normally(lines)]
    assert not broken, f"{len(broken)} streams did not end in a completion: {broken[:3]}"
    retries = [lines[0] for kind, lines in results if kind == "http 429"]
    assert all(retry.isdigit() for retry in retries), retries[:5]

    text = httpx.get(gw.url + "/metrics").text

    def outcome(name: str) -> float:
        return metric_value(text, "saber_requests_total", task="code_qna", outcome=name)

    served, demoted = outcome("served"), outcome("served_demoted")
    demotions = metric_value(text, "saber_demotions_total", task="code_qna")
    figures = (
        f"{how}; served {served}, served_demoted {demoted}, demotions {demotions}, "
        f"queue_full {outcome('rejected_queue_full')}, expired {outcome('rejected_expired')}, "
        f"queued streams {len(queued)}"
    )
    print(figures)
    assert outcome("rejected_expired") == 0, figures
    assert outcome("rejected_queue_full") == how["http 429"], figures
    assert served + demoted == how["stream"] == STREAMS - how["http 429"], figures
    assert demotions > 0 and demoted == demotions, figures  # every demoted one served
    assert queued, figures
