"""Every sequence counted: n, best_of and prompt lists in admission, the load, the
metrics and /saber/status; one request never pushes the engine past max_concurrency;
a request larger than max_sequences_per_request is a 400; ignore_eos is an exact
length. Real gateways, the official openai SDK, saber-sim (or FakeVllm where the
test reads what went upstream)."""

from __future__ import annotations

import concurrent.futures
import functools
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from fake_vllm import MODEL, FakeVllm
from gateway_support import (
    UNCAPPED,
    GatewayFactory,
    offered,
    requests_total,
    sim_running,
    start_fake,
)

from harness import metric_value, wait_until
from saber.gateway import RunningGateway
from saber.gateway.observe.logs import REQUEST_LOGGER, JsonFormatter
from saber.sim.http import RunningSim, serve_in_thread


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    """Slower than the other tests' (time scale 4, not 20): a request runs for seconds,
    long enough to be seen running on a busy machine."""
    with serve_in_thread(time_scale=4, max_num_seqs=512) as running:
        yield running


def client(gw: RunningGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0, timeout=60)


def load(gw: RunningGateway) -> tuple[int, int, float, float]:
    """(load, running requests) in /saber/status, saber_requests_in_flight, and the
    backend's own running count as the gateway last read it (-1 before any)."""
    status = httpx.get(gw.url + "/saber/status").json()
    flight = metric_value(httpx.get(gw.url + "/metrics").text, "saber_requests_in_flight")
    backend = status["backend"]["running"]
    return status["load"], status["running_requests"], flight, -1 if backend is None else backend


def while_running(
    gw: RunningGateway, sim: RunningSim, call: Callable[[], Any], seqs: int
) -> tuple[tuple[Any, ...], Any]:
    """Run ``call`` in a thread; what ``load`` and saber-sim's running count read once
    both reached ``seqs``, and ``call``'s answer."""
    seen: list[tuple[Any, ...]] = []

    def counted() -> bool:
        seen.append((*load(gw), sim_running(sim)))
        return seen[-1][0] == seqs and seen[-1][4] == seqs

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        answer = pool.submit(call)
        assert wait_until(counted, timeout=30), f"(load, requests, gauge, _, sim): {seen[-3:]}"
        return seen[-1], answer.result(timeout=60)


def test_a_list_of_200_prompts_counts_200_while_it_runs(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(sim.url)
    prompts = [f"def f{i}(x):" for i in range(200)]
    call = functools.partial(
        client(gw).completions.create,
        model=sim.model,
        prompt=prompts,
        max_tokens=200,
        extra_body={"ignore_eos": True},
    )
    seen, done = while_running(gw, sim, call, 200)
    gateway_load, requests, gauge, _, engine = seen
    assert (gateway_load, requests, gauge, engine) == (200, 1, 200, 200)
    assert len(done.choices) == 200
    assert done.usage is not None and done.usage.completion_tokens == 200 * 200
    assert wait_until(lambda: load(gw)[0] == 0, timeout=10), load(gw)


def test_one_request_never_takes_the_engine_past_max_concurrency(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    # max_concurrency 8: a request of 6 sequences runs; one of 4 waits until it ends.
    gw = gateway_factory(sim.url, max_concurrency=8, **UNCAPPED)
    api = client(gw)
    seen: list[tuple[int, int]] = []  # (gateway load, engine running)

    def watch(predicate: Any) -> bool:
        gateway_load = load(gw)[0]
        seen.append((gateway_load, int(sim_running(sim))))
        return bool(predicate(gw.gateway.scheduler))

    # About 3 s alone at time scale 4: time to see the other wait, on a busy machine too.
    six = {"prompt": ["a", "b"], "n": 3, "max_tokens": 1500, "extra_body": {"ignore_eos": True}}
    four = {"prompt": "c", "n": 4, "max_tokens": 50, "extra_headers": {"x-saber-task": "code_qna"}}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(api.completions.create, model=sim.model, **six)
        assert wait_until(lambda: watch(lambda s: s.load == 6), timeout=20), seen[-3:]
        second = pool.submit(api.completions.create, model=sim.model, **four)
        waits = lambda s: s.load == 6 and s.queued() == 1  # noqa: E731
        assert wait_until(lambda: watch(waits), timeout=10), seen[-3:]
        assert len(first.result(timeout=60).choices) == 6
        assert len(second.result(timeout=60).choices) == 4
    assert wait_until(lambda: watch(lambda s: s.load == 0), timeout=10), seen[-3:]
    assert max(gateway for gateway, _ in seen) <= 8
    assert max(engine for _, engine in seen) <= 8, seen


def test_n_counts_each_choice(gateway_factory: GatewayFactory, sim: RunningSim) -> None:
    gw = gateway_factory(sim.url)
    call = functools.partial(
        client(gw).chat.completions.create,
        model=sim.model,
        messages=[{"role": "user", "content": "write a parser"}],
        n=3,
        max_tokens=600,
        extra_body={"ignore_eos": True},
    )
    seen, done = while_running(gw, sim, call, 3)
    assert seen[1:3] == (1, 3)  # one request, three in the gauge
    assert len(done.choices) == 3


@pytest.mark.parametrize(
    ("fields", "seqs"),
    [
        ({"prompt": "x", "best_of": 4}, 4),  # vLLM V0 ran best_of sequences
        ({"prompt": "x", "n": 3, "best_of": 2}, 3),
        ({"prompt": [[1, 2], [3]], "n": 2}, 4),
        ({"prompt": [1, 2, 3], "n": 2}, 2),  # one list of token ids is one prompt
    ],
)
def test_best_of_and_prompts_reach_the_scheduler(
    gateway_factory: GatewayFactory, fields: dict[str, Any], seqs: int
) -> None:
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake, trace=True)
    body = {"model": MODEL, "max_tokens": 5, **fields}
    assert httpx.post(gw.url + "/v1/completions", json=body).status_code == 200
    (req,) = offered(gw)
    assert req.seqs == seqs
    assert fake.posts[0][0] == body  # sent as it came


def test_ignore_eos_with_max_tokens_is_an_exact_length(gateway_factory: GatewayFactory) -> None:
    fake = FakeVllm()
    gw = start_fake(gateway_factory, fake, trace=True)
    api = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
    api.completions.create(model=MODEL, prompt="x", max_tokens=40, extra_body={"ignore_eos": True})
    api.completions.create(
        model=MODEL, prompt="x", max_tokens=40, stop=["\n"], extra_body={"ignore_eos": True}
    )
    exact, stoppable = offered(gw)
    assert exact.exact and exact.tokens == exact.floor == exact.cap == 40
    assert not stoppable.exact and stoppable.floor == 0  # a stop string may end it sooner
    sent = fake.posts[0][0]
    assert sent == {"model": MODEL, "prompt": "x", "max_tokens": 40, "ignore_eos": True}


def test_more_sequences_than_one_request_may_run_is_a_400(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(sim.url)
    with pytest.raises(openai.BadRequestError) as info:
        client(gw).completions.create(model=sim.model, prompt=["x"] * 300, max_tokens=5)
    err = info.value.body
    assert isinstance(err, dict)
    assert err["message"] == (
        "this request runs 300 sequences (n=1 x 300 prompts); the most one request may run "
        "is 256 (max_sequences_per_request)"
    )
    assert (err["type"], err["param"], err["code"]) == (
        "invalid_request_error",
        "prompt",
        "too_many_sequences",
    )
    small = gateway_factory(sim.url, max_sequences_per_request=8)
    with pytest.raises(openai.BadRequestError) as info:
        client(small).chat.completions.create(
            model=sim.model, messages=[{"role": "user", "content": "hi"}], n=9, max_tokens=5
        )
    assert isinstance(info.value.body, dict)
    assert info.value.body["param"] == "n"
    assert info.value.body["message"].startswith("this request runs 9 sequences (n=9 x 1 prompt)")
    done = client(small).completions.create(model=sim.model, prompt=["x"] * 8, max_tokens=2)
    assert len(done.choices) == 8
    for g in (gw, small):
        assert requests_total(g, "invalid_request") == 1
        assert g.gateway.scheduler.load == 0 and g.gateway.scheduler.queued() == 0


def test_expected_tokens_and_overruns_count_every_sequence(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # code_summary allows 128 tokens a sequence; FakeVllm makes max_tokens in all.
    fake = FakeVllm(tokens=300)
    gw = start_fake(gateway_factory, fake, task_max_tokens="off", log_requests=True)
    summary = {"x-saber-task": "code_summary"}
    with caplog.at_level(logging.INFO, logger=REQUEST_LOGGER):
        for n in (3, 1):
            body = {"model": MODEL, "prompt": "x", "n": n, "max_tokens": 200, "ignore_eos": True}
            httpx.post(gw.url + "/v1/completions", json=body, headers=summary)
    records = [r for r in caplog.records if r.name == REQUEST_LOGGER]
    lines = [json.loads(JsonFormatter().format(r)) for r in records]
    three, one = (x for x in lines if x.get("task") == "code_summary")
    assert (three["seqs"], three["expected_tokens"], three["overrun"]) == (3, 600, False)
    assert (one["seqs"], one["expected_tokens"], one["overrun"]) == (1, 200, True)
    text = httpx.get(gw.url + "/metrics").text
    assert metric_value(text, "saber_task_overrun_total", task="code_summary") == 1
