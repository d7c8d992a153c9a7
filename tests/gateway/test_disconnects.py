"""Clients that go away: while queued, while running, and 1,000 times at random.

Afterwards the gateway holds no ticket and no slot, reports 0 in flight, and
saber-sim (which aborts a request whose connection closes, as vLLM does) runs
nothing.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import httpx
import pytest
from gateway_support import GatewayFactory, idle, sim_running

from harness import metric_value, wait_until
from saber.gateway import RunningGateway
from saber.scheduler import Action
from saber.sim.http import RunningSim

LONG = 5000  # tokens: seconds of generation even at the test time scale


def metrics(gw: RunningGateway) -> str:
    return httpx.get(gw.url + "/metrics").text


def body(sim: RunningSim, tokens: int, stream: bool) -> dict[str, object]:
    return {
        "model": sim.model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": stream,
    }


def test_disconnect_while_queued_then_while_running(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(sim.url, max_concurrency=1, queued_comment_interval_s=0.05)
    url = gw.url + "/v1/chat/completions"
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", url, json=body(sim, LONG, True)) as running,
    ):
        assert running.status_code == 200
        lines = running.iter_lines()
        assert next(lines).startswith("data: ")
        assert wait_until(lambda: sim_running(sim) == 1)

        # A streaming request behind it is held, and told so with SSE comments.
        with (
            httpx.Client(timeout=30) as c2,
            c2.stream("POST", url, json=body(sim, 5, True)) as queued,
        ):
            assert queued.headers["x-saber-outcome"] == "queued"
            waiting = queued.iter_lines()  # keep it: a dropped iterator closes the connection
            assert next(waiting) == ": queued"
            assert gw.gateway.scheduler.queued() == 1
        # ... and a non-streaming one, whose client gives up.
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json=body(sim, 5, False), timeout=0.3)

        assert wait_until(lambda: gw.gateway.scheduler.queued() == 0)
        text = metrics(gw)
        assert metric_value(text, "saber_requests_total", outcome="cancelled_queued") == 2
        assert metric_value(text, "saber_requests_in_flight") == 1
        assert sim_running(sim) == 1  # the queued ones never reached the backend
    # The running stream's client hung up: the upstream request is aborted.
    assert wait_until(lambda: idle(gw, sim))
    text = metrics(gw)
    assert metric_value(text, "saber_requests_total", outcome="cancelled_running") == 1
    assert metric_value(text, "saber_requests_in_flight") == 0


def test_non_streaming_disconnect_aborts_upstream(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(sim.url)
    done = threading.Event()

    def give_up() -> None:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(gw.url + "/v1/chat/completions", json=body(sim, LONG, False), timeout=0.5)
        done.set()

    t = threading.Thread(target=give_up)
    t.start()
    assert wait_until(lambda: sim_running(sim) == 1)
    t.join()
    assert wait_until(lambda: idle(gw, sim))
    assert metric_value(metrics(gw), "saber_requests_total", outcome="cancelled_running") == 1


N_RANDOM = 1000


def test_no_slot_leaks_across_1000_random_disconnects(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(
        sim.url,
        trace=True,
        max_concurrency=6,
        queue_cap=None,
        queued_comment_interval_s=0.02,
    )
    started = time.monotonic()
    kinds = asyncio.run(_random_clients(gw, sim, seed=1234))
    elapsed = time.monotonic() - started
    assert wait_until(lambda: idle(gw, sim), timeout=10), (
        f"leak: active={gw.gateway.admission.active} load={gw.gateway.scheduler.load} "
        f"queued={gw.gateway.scheduler.queued()} sim={sim_running(sim)}"
    )
    text = metrics(gw)
    assert metric_value(text, "saber_requests_in_flight") == 0
    assert metric_value(text, "saber_queue_depth") == 0
    # Every request that reached the scheduler left it exactly once, and was counted
    # exactly once. (A client that gave up before its body arrived never got that far:
    # it is counted as cancelled_upload.)
    trace = gw.gateway.admission.trace or []
    offered = [e.arg.id for e in trace if e.call == "offer"]  # type: ignore[union-attr]
    released = [e.arg for e in trace if e.call in ("finish", "fail", "cancel")]
    rejected = [d.request.id for e in trace for d in e.decisions if d.action is Action.REJECT]
    assert len(offered) >= N_RANDOM
    assert sorted(released + rejected) == sorted(offered)
    uploads = metric_value(text, "saber_requests_total", outcome="cancelled_upload")
    assert metric_value(text, "saber_requests_total") == len(offered) + uploads
    cancelled = metric_value(
        text, "saber_requests_total", outcome="cancelled_queued"
    ) + metric_value(text, "saber_requests_total", outcome="cancelled_running")
    # The traffic did exercise disconnects: at least a hundred requests ended in one
    # (about 300 here; how many depends on how fast the machine serves the rest).
    assert cancelled >= 100, f"only {cancelled:.0f} disconnects were exercised"
    assert metric_value(text, "saber_requests_total", outcome="cancelled_queued") > 0
    assert metric_value(text, "saber_requests_total", outcome="cancelled_running") > 0
    assert kinds["completed"] > 0
    assert elapsed < 60


async def _random_clients(gw: RunningGateway, sim: RunningSim, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    gate = asyncio.Semaphore(48)
    kinds = {"completed": 0, "gave_up": 0}
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30, limits=limits) as client:

        async def one(i: int) -> None:
            stream = rng.random() < 0.5
            chat = rng.random() < 0.5
            tokens = rng.randint(1, 120)
            give_up_after = rng.uniform(0.0, 0.12) if rng.random() < 0.8 else None
            payload = body(sim, tokens, stream)
            if not chat:
                payload.pop("messages")
                payload["prompt"] = "def f():"
            path = "/v1/chat/completions" if chat else "/v1/completions"
            async with gate:
                task = asyncio.ensure_future(_request(client, path, payload, stream, rng.random()))
                try:
                    await asyncio.wait_for(task, give_up_after)
                    kinds["completed"] += 1
                except TimeoutError:
                    kinds["gave_up"] += 1

        # Clients that give up very early may never reach the gateway: keep going
        # until N_RANDOM requests have reached the scheduler.
        trace = gw.gateway.admission.trace
        assert trace is not None
        while sum(e.call == "offer" for e in list(trace)) < N_RANDOM:
            await asyncio.gather(*(one(i) for i in range(200)))
    return kinds


async def _request(
    client: httpx.AsyncClient, path: str, payload: dict[str, object], stream: bool, cut: float
) -> None:
    if not stream:
        r = await client.post(path, json=payload)
        assert r.status_code == 200, r.text
        return
    async with client.stream("POST", path, json=payload) as r:
        assert r.status_code == 200
        n = 0
        async for _ in r.aiter_lines():
            n += 1
            if cut < 0.2 and n > 3:
                return  # hang up in the middle of the stream
