"""Does saber-sim over HTTP decode as fast as the engine model says it should?

``predict`` runs requests through an ``Engine`` in virtual time (stepped back to
back, no sleeping); ``measure`` sends the same requests to a running saber-sim
and times the SSE frames as they arrive. Both report each request's decode
speed, (tokens - 1) / (last token - first token), in engine tokens per second
(measured wall speeds are divided by the time scale).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass

import httpx

from saber.engine import Engine, EngineRequest, get_preset
from saber.sim.http.settings import SimSettings
from saber.workload import filler


@dataclass(frozen=True)
class Comparison:
    concurrency: int
    predicted: float  # mean decode speed, engine tokens/s
    measured: float

    @property
    def error(self) -> float:
        """Relative error of the measurement against the prediction."""
        return (self.measured - self.predicted) / self.predicted


def prompt_text(tokens: int) -> str:
    return filler(tokens)


def predict(
    settings: SimSettings, concurrency: int, *, prompt_tokens: int, output_tokens: int
) -> list[float]:
    """Decode speeds of ``concurrency`` requests that all arrive at t=0."""
    engine = Engine(
        get_preset(settings.preset),
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        kv_capacity_tokens=settings.kv_capacity_tokens,
    )
    for i in range(concurrency):
        engine.add(EngineRequest(f"r{i}", prompt_tokens, output_tokens, arrival=0.0))
    finished: list[EngineRequest] = []
    now = 0.0
    while (result := engine.step(now, max_steps=1)) is not None:
        now = result.end
        finished.extend(result.finished)
    return [_speed(r.output_tokens, r.first_token_at, r.finished_at) for r in finished]


async def measure(
    url: str,
    model: str,
    concurrency: int,
    *,
    prompt_tokens: int,
    output_tokens: int,
    time_scale: float,
) -> list[float]:
    """Decode speeds of ``concurrency`` simultaneous streaming requests to ``url``
    (``http://host:port``), from the arrival times of their SSE frames."""
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        body = {
            "model": model,
            "prompt": prompt_text(prompt_tokens),
            "max_tokens": output_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        speeds = await asyncio.gather(*(_one(client, body) for _ in range(concurrency)))
    return [s / time_scale for s in speeds]


async def _one(client: httpx.AsyncClient, body: dict[str, object]) -> float:
    first = last = None
    tokens = 0
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.perf_counter()
            if '"choices":[]' not in line:  # a token frame: no need to parse it
                first = now if first is None else first
                last = now
            else:
                tokens = json.loads(line[6:])["usage"]["completion_tokens"]
    return _speed(tokens, first, last)


def _speed(tokens: int, first: float | None, last: float | None) -> float:
    if first is None or last is None or tokens < 2 or last <= first:
        raise ValueError("a decode speed needs two tokens at different times")
    return (tokens - 1) / (last - first)


def compare(predicted: list[float], measured: list[float], concurrency: int) -> Comparison:
    return Comparison(concurrency, statistics.fmean(predicted), statistics.fmean(measured))
