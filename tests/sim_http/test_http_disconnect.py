"""A client that leaves frees its slot and KV blocks, as in vLLM; queues show in /metrics."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from harness import held_request
from saber.sim.http import RunningSim, serve_in_thread

Wait = Callable[..., Any]

LONG = {"prompt": "a b c", "max_tokens": 2000, "ignore_eos": True}
STREAM = {**LONG, "stream": True}


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[RunningSim]:
    # Steps of 15 ms or more on the wall: "within one step" leaves room for a
    # loaded machine.
    with serve_in_thread(time_scale=0.5, max_num_seqs=2, max_model_len=4096) as running:
        yield running


class Streamer(threading.Thread):
    """A streaming client in the background, reading until told to hang up."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.got_token = threading.Event()
        self.hang_up = threading.Event()

    def run(self) -> None:
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", self.url, json=STREAM) as resp,
        ):
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    self.got_token.set()
                if self.hang_up.is_set():
                    return

    def stop(self) -> None:
        self.hang_up.set()
        self.join(timeout=10)


def test_stream_disconnect_frees_the_slot_within_one_step(
    slow_sim: RunningSim, scrape: Callable[..., float], wait_for: Wait
) -> None:
    engine = slow_sim.state.engine
    labels = {"model_name": slow_sim.model}
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", f"{slow_sim.api_url}/completions", json={**LONG, "stream": True}
        ) as resp,
    ):
        lines = resp.iter_lines()  # not a for loop: leaving one would hang up already
        frames = 0
        while frames < 3:
            frames += next(lines).startswith("data: {")
        assert scrape(slow_sim.url, "vllm:num_requests_running", **labels) == 1
        assert scrape(slow_sim.url, "vllm:kv_cache_usage_perc", **labels) > 0
        steps = engine.total_steps
    # Leaving the block closes the connection with the body unread.
    wait_for(lambda: engine.num_running, lambda n: n == 0, step=0.0005, describe="none running")
    assert engine.total_steps - steps <= 1
    assert scrape(slow_sim.url, "vllm:num_requests_running", **labels) == 0
    assert scrape(slow_sim.url, "vllm:kv_cache_usage_perc", **labels) == 0


def test_non_streaming_disconnect_aborts(slow_sim: RunningSim, wait_for: Wait) -> None:
    engine = slow_sim.state.engine
    with held_request(f"{slow_sim.api_url}/completions", LONG):
        wait_for(lambda: engine.num_running, lambda n: n == 1, describe="it running")
    wait_for(lambda: engine.num_running, lambda n: n == 0, describe="none running")
    assert engine.kv_usage == 0


def test_past_max_num_seqs_requests_wait_and_can_leave_the_queue(
    slow_sim: RunningSim, scrape: Callable[..., float], wait_for: Wait
) -> None:
    engine = slow_sim.state.engine
    url = f"{slow_sim.api_url}/completions"
    labels = {"model_name": slow_sim.model}
    running = [Streamer(url) for _ in range(2)]
    for s in running:
        s.start()
    for s in running:
        assert s.got_token.wait(10)
    with held_request(url, LONG):  # a third client, that gives up while still queued
        wait_for(lambda: engine.num_waiting, lambda n: n == 1, describe="one waiting")
        assert scrape(slow_sim.url, "vllm:num_requests_running", **labels) == 2
        assert scrape(slow_sim.url, "vllm:num_requests_waiting", **labels) == 1
    wait_for(lambda: engine.num_waiting, lambda n: n == 0, describe="none waiting")
    assert engine.num_running == 2
    assert scrape(slow_sim.url, "vllm:num_requests_waiting", **labels) == 0
    for s in running:
        s.stop()
    wait_for(
        lambda: (engine.num_running, engine.num_waiting),
        lambda seen: seen == (0, 0) and engine.idle,
        describe="the engine idle (running, waiting)",
    )
