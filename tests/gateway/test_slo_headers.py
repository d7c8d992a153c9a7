"""A request's own SLO through the gateway (llm-d's headers), with the ``openai`` SDK:
its limits are admitted against and counted by part, a bad one is a 400 that names its
header, and a stream with a tight TPOT keeps its pace while a burst arrives, where vLLM
alone lets it slip.

saber-sim (the paper preset, real time) and the gateway run as processes of their own,
the gateway with the shipped profile of that preset, so that what it predicts is what
the engine does and neither shares an interpreter with the clients.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import yaml

from harness import EngineProcess, free_port, gateway_process, metric_value
from saber.config import DEFAULT_GATEWAY_CONFIG, DEFAULT_PROFILE_DIR

MODEL = "qwen-coder"
PACE_MS = 16.0
"""The tight TPOT: twice what one stream gets alone on the paper preset (7.7 ms); 60
more streams beside it make its mean about 36 ms (measured: /tmp probe, 60 x 400 tokens
0.3 s into a 400-token stream: 35.9 ms)."""
BURST = 60


@pytest.fixture(scope="module")
def sim() -> Iterator[EngineProcess]:
    port = free_port()
    argv = [
        sys.executable, "-m", "saber.sim.http", "--host", "127.0.0.1", "--port", str(port),
        "--preset", "paper", "--served-model-name", MODEL, "--disable-uvicorn-access-log",
    ]  # fmt: skip
    with EngineProcess("saber-sim", argv, port=port, model=MODEL) as running:
        yield running


@pytest.fixture(scope="module")
def gateway(sim: EngineProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = yaml.safe_load(DEFAULT_GATEWAY_CONFIG.read_text())
    # Requests of code_generation may state their own TTFT and TPOT (not only relax its
    # e2e limit, the default bounds).
    config["tasks"]["code_generation"]["slo_bounds"] = {
        "ttft_s": [0.05, 60.0],
        "tpot_s": [0.005, 1.0],
        "e2e_s": [1.0, 600.0],
    }
    path = tmp_path_factory.mktemp("slo") / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    process = gateway_process(
        model=MODEL,
        backend=sim.base_url,
        profile=DEFAULT_PROFILE_DIR / "saber-sim-paper.json",
        config=path,
        clean_env=True,
    )
    with process:
        yield process.base_url


def _client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)


async def _stream(client: openai.AsyncOpenAI, tokens: int, **headers: str) -> tuple[float, int]:
    """One streamed answer of exactly ``tokens``: its TPOT as a client measures it (s) and
    the tokens its usage counts."""
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Write the code for: a parser"}],
        max_tokens=tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
        extra_headers=headers or None,
    )
    first = last = None
    usage = 0
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            last = time.monotonic()
            first = first or last
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
    assert first is not None and last is not None and usage == tokens
    return (last - first) / (usage - 1), usage


async def _paced_in_a_burst(url: str, **headers: str) -> float:
    """A 400-token stream's TPOT while BURST others as long arrive 0.3 s into it, each
    wanted within a minute (``x-slo-e2e-ms``, which vLLM ignores)."""
    client = _client(url)

    async def later(i: int) -> Any:
        await asyncio.sleep(0.3 + 0.002 * i)
        return await _stream(client, 400, **{"x-slo-e2e-ms": "60000"})

    paced, *_ = await asyncio.gather(
        _stream(client, 400, **headers), *(later(i) for i in range(BURST))
    )
    await client.close()
    return paced[0]


def test_a_request_s_own_limits_are_admitted_against_and_counted_by_part(gateway: str):
    client = openai.OpenAI(base_url=gateway + "/v1", api_key="none", max_retries=0)
    headers = {"x-slo-ttft-ms": "5000", "x-slo-tpot-ms": "500"}
    raw = client.chat.completions.with_raw_response.create(
        model="generate",
        messages=[{"role": "user", "content": "Write the code for: a queue"}],
        max_tokens=20,
        stream=True,
        extra_headers=headers,
    )
    assert raw.status_code == 200
    assert raw.headers["x-saber-task"] == "code_generation"
    assert list(raw.parse())
    text = httpx.get(gateway + "/metrics").text
    met = {
        part: metric_value(
            text, "saber_slo_requests_total", task="code_generation", part=part, met="true"
        )
        for part in ("ttft", "tpot", "e2e")
    }
    assert met == {"ttft": 1.0, "tpot": 1.0, "e2e": 1.0}


@pytest.mark.parametrize(
    ("header", "value", "says"),
    [
        ("x-slo-tpot-ms", "fast", "positive number of milliseconds"),
        ("x-slo-ttft-ms", "-5", "positive number of milliseconds"),
        ("x-slo-tpot-ms", "1", "allows 5 to 1000 ms"),
        ("x-slo-e2e-ms", "999999999", "allows 1000 to 600000 ms"),
    ],
)
def test_a_bad_limit_is_a_400_that_names_its_header(gateway: str, header, value, says):
    client = openai.OpenAI(base_url=gateway + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="generate",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=5,
            extra_headers={header: value},
        )
    error = caught.value.body
    assert caught.value.status_code == 400
    assert error["param"] == header and header in error["message"] and says in error["message"]
    assert error["type"] == "invalid_request_error"


def test_a_chat_task_takes_no_own_tpot_it_does_not_state(gateway: str):
    """code_qna's default bounds are its own parts only (and then only looser)."""
    client = openai.OpenAI(base_url=gateway + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=5,
            extra_headers={"x-slo-e2e-ms": "100"},  # tighter than its own
        )
    assert caught.value.body["code"] == "slo_out_of_bounds"


@pytest.mark.slow
def test_a_tight_tpot_keeps_its_pace_in_a_burst_where_vllm_alone_lets_it_slip(
    sim: EngineProcess, gateway: str
):
    alone = asyncio.run(_paced_in_a_burst(sim.base_url))
    through = asyncio.run(_paced_in_a_burst(gateway, **{"x-slo-tpot-ms": f"{PACE_MS:g}"}))
    assert alone > PACE_MS / 1000, alone  # vLLM alone: every stream slows together
    assert through <= PACE_MS / 1000, through  # the gateway held the burst back
