"""/metrics carries vLLM's names and labels, from a registry private to each app."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable

import httpx
from starlette.testclient import TestClient

from harness import wait_until
from saber.sim.http import RunningSim, SimSettings, create_app, serve_in_thread

Scrape = Callable[..., float]
ROUNDS = 10


def test_vllm_names_with_model_name_label(sim: RunningSim, scrape: Scrape) -> None:
    labels = {"model_name": sim.model}
    before = {
        n: scrape(sim.url, n, **labels)
        for n in (
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "vllm:time_to_first_token_seconds_count",
            "vllm:e2e_request_latency_seconds_count",
        )
    }
    body = {"prompt": "one two three four", "max_tokens": 5, "ignore_eos": True}
    assert httpx.post(f"{sim.api_url}/completions", json=body).status_code == 200
    after = {n: scrape(sim.url, n, **labels) for n in before}
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == 4
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 5
    assert after["vllm:time_to_first_token_seconds_count"] == (
        before["vllm:time_to_first_token_seconds_count"] + 1
    )
    assert after["vllm:e2e_request_latency_seconds_count"] == (
        before["vllm:e2e_request_latency_seconds_count"] + 1
    )
    for gauge in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    ):
        assert scrape(sim.url, gauge, **labels) == 0
    assert scrape(sim.url, "vllm:request_success_total", finished_reason="length") >= 1


def test_running_counts_every_choice_of_every_prompt_as_vllm_v1(scrape: Scrape) -> None:
    # vLLM's V1 engine runs each of n choices as a request of its own (its parallel
    # sampling fans a request out into n), and each prompt of a list too.
    with serve_in_thread(time_scale=2) as sim:
        body = {"prompt": ["a", "b"], "n": 3, "max_tokens": 100, "ignore_eos": True}
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            answer = pool.submit(httpx.post, f"{sim.api_url}/completions", json=body, timeout=30)
            seen: list[float] = []

            def running() -> bool:
                seen.append(scrape(sim.url, "vllm:num_requests_running", model_name=sim.model))
                return seen[-1] > 0

            assert wait_until(running, timeout=10), seen[-5:]
            assert seen[-1] == 6
            assert answer.result().status_code == 200


def test_each_app_has_its_own_registry() -> None:
    apps = [create_app(SimSettings(served_model_name=(f"m{i}",), time_scale=50)) for i in range(2)]
    with TestClient(apps[0]) as a, TestClient(apps[1]) as b:
        a.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, "ignore_eos": True})
        text_a, text_b = a.get("/metrics").text, b.get("/metrics").text
    assert 'vllm:generation_tokens_total{engine="0",model_name="m0"} 2.0' in text_a
    assert 'vllm:generation_tokens_total{engine="0",model_name="m1"} 0.0' in text_b
    assert "m1" not in text_a


def test_preemptions_are_counted(scrape: Scrape) -> None:
    # A KV cache of 4 blocks: two requests that each grow to 4 blocks collide, if the
    # second is admitted before the first holds all 4 (48 tokens, 0.15 s at this scale).
    # Two threads usually start that close together, but a busy machine may start the
    # second later: pairs are sent until one collides (at most ROUNDS).
    with serve_in_thread(time_scale=5, kv_capacity_tokens=64, max_model_len=64) as sim:
        body = {"prompt": "a b", "max_tokens": 60, "ignore_eos": True}
        engine = sim.state.engine

        def post(_: int) -> int:
            return httpx.post(f"{sim.api_url}/completions", json=body, timeout=30).status_code

        codes = []
        for _ in range(ROUNDS):
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                codes += pool.map(post, range(2))
            if engine.total_preemptions:
                break
        assert codes == [200] * len(codes)
        assert engine.total_preemptions >= 1, f"no collision in {len(codes) // 2} pairs"
        counted = scrape(sim.url, "vllm:num_preemptions_total", model_name=sim.model)
        assert counted == engine.total_preemptions >= 1
