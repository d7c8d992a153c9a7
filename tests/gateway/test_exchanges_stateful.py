"""A hypothesis state machine over exchanges with a real gateway and saber-sim.

Clients arrive (streaming or not, over the official async SDK), hang up while
queued or running, the backend fails (saber-sim's fault API: 500s, stalled streams,
refused connections) and exceptions are injected at any step of an exchange.
At every step admission knows exactly what the scheduler holds and the load stays
within its cap; at the end of every run nothing is held anywhere, every request
was answered or hung up by its client, /metrics counted each exactly once, and the
gateway serves the next one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any

import httpx
import openai
import pytest
from gateway_support import GatewayFactory, call_in_loop, held, idle
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)
from injection import STEPS, Injector, counts

from harness import wait_for
from saber.gateway import RunningGateway
from saber.sim.http import RunningSim

CAP = 2
TASKS = ("code_qna", "code_generation", "code_completion")
GATEWAY = {
    "max_concurrency": CAP,
    "queue_cap": 3,
    # Demoted requests are turned away soon after: the machine is about leaks, not waits.
    "tasks.code_qna.useful_s": 1.3,
    "tasks.code_generation.useful_s": 8.3,
    "tasks.code_completion.useful_s": 1.3,
    "queued_comment_interval_s": 0.05,
    "backend.read_timeout_s": 0.5,  # a stalled backend is given up on quickly
}
NO_FAULTS = {"error_rate": 0.0, "stall_prob": 0.0}


class ClientLoop:
    """An event loop on a thread of its own, where the clients run."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, str]) -> concurrent.futures.Future[str]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


async def one_request(
    client: openai.AsyncOpenAI, model: str, stream: bool, tokens: int, task: str
) -> str:
    """How the client saw its request end."""
    args: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": tokens,
        "extra_body": {"ignore_eos": True},
        "extra_headers": {"x-saber-task": task},
    }
    try:
        if stream:
            async for _ in await client.chat.completions.create(**args, stream=True):
                pass
        else:
            await client.chat.completions.create(**args)
    except openai.APIStatusError as exc:
        return f"http {exc.status_code}"
    except openai.APIConnectionError:
        return "connection lost"  # the gateway must never do this
    except openai.APIError:
        return "error event"
    return "served"


def set_faults(sim: RunningSim, faults: dict[str, float]) -> None:
    """saber-sim's fault API; it does not answer while it refuses connections."""
    wait_for(
        lambda: sim.state.listener.refusing_for,
        lambda left: left == 0,
        timeout=5,
        describe="saber-sim accepting connections again",
    )
    httpx.post(sim.url + "/sim/faults", json=faults).raise_for_status()


Client = concurrent.futures.Future[str]  # how its request ended, once it has


class Exchanges(RuleBasedStateMachine):
    def __init__(self, gw: RunningGateway, sim: RunningSim, clients: ClientLoop) -> None:
        super().__init__()
        self.gw, self.sim, self.loop = gw, sim, clients
        self.sdk = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        self.injector = Injector(gw)
        self.before = counts(gw)
        self.clients: list[Client] = []
        self.hung_up = 0
        self._trace_seen = 0
        self._offers = 0

    def offers(self) -> int:
        """Requests offered to the scheduler so far (from admission's trace)."""
        trace = self.gw.gateway.admission.trace
        assert trace is not None
        new = trace[self._trace_seen :]
        self._trace_seen += len(new)
        self._offers += sum(e.call == "offer" for e in new)
        return self._offers

    @rule(
        burst=st.lists(
            st.tuples(st.booleans(), st.integers(1, 2000), st.sampled_from(TASKS)),
            min_size=1,
            max_size=3,
        )
    )
    def arrive(self, burst: list[tuple[bool, int, str]]) -> None:
        """One to three clients, each sent once the gateway holds the one before it."""
        for stream, tokens, task in burst:
            self._send(stream, tokens, task)

    def _send(self, stream: bool, tokens: int, task: str) -> None:
        offered = self.offers()
        future = self.loop.submit(one_request(self.sdk, self.sim.model, stream, tokens, task))
        self.clients.append(future)
        # On once the gateway holds it (or has answered it): a hang-up is then its own.
        wait_for(
            lambda: (self.offers(), future.done()),
            lambda seen: seen[0] > offered or seen[1],
            timeout=10,
            describe=f"the request offered (offers were {offered}), or answered",
        )

    @rule(pick=st.integers(0, 100))
    def hang_up(self, pick: int) -> None:
        """A client still waiting hangs up (whether one still waits is up to timing, so
        this is no precondition: hypothesis wants the same draws on a replay)."""
        waiting = [c for c in self.clients if not c.done()]
        if waiting:
            self._hang_up(waiting[pick % len(waiting)])

    def _hang_up(self, client: Client) -> None:
        if not client.done() and client.cancel():
            self.hung_up += 1

    @rule(error_rate=st.sampled_from([0.0, 0.5, 1.0]), stall_prob=st.sampled_from([0.0, 0.5]))
    def backend_faults(self, error_rate: float, stall_prob: float) -> None:
        set_faults(self.sim, {"error_rate": error_rate, "stall_prob": stall_prob, "stall_after": 3})

    @rule()
    def backend_refuses(self) -> None:
        set_faults(self.sim, {"refuse_for": 0.2})

    @rule(step=st.sampled_from(STEPS))
    def inject(self, step: str) -> None:
        self.injector.arm(step)

    @invariant()
    def admission_knows_what_the_scheduler_holds(self) -> None:
        g = self.gw.gateway
        s = g.scheduler
        active, load, queued = call_in_loop(
            self.gw, lambda: (g.admission.active, s.load, s.queued())
        )
        assert active == load + queued
        assert load <= CAP

    def teardown(self) -> None:
        self.injector.disarm()
        set_faults(self.sim, NO_FAULTS)
        for client in self.clients:  # whoever still waits gives up
            self._hang_up(client)
        _, pending = concurrent.futures.wait(self.clients, timeout=30)
        assert not pending
        wait_for(
            lambda: idle(self.gw, self.sim),
            timeout=10,
            describe=lambda: held(self.gw, self.sim),
        )
        seen = [c.result() for c in self.clients if not c.cancelled()]
        assert "connection lost" not in seen
        assert len(seen) + self.hung_up == len(self.clients)
        after = counts(self.gw)
        assert after["total"] - self.before["total"] == len(self.clients), "not one count each"
        assert after["cancelled"] - self.before["cancelled"] <= self.hung_up
        assert after["internal_error"] - self.before["internal_error"] <= self.injector.fired
        assert after["in_flight"] == 0 and after["queued"] == 0
        answer = self.loop.submit(one_request(self.sdk, self.sim.model, True, 3, TASKS[0]))
        assert answer.result(timeout=10) == "served"
        self.loop.submit(self.sdk.close()).result(timeout=5)


@pytest.mark.slow
def test_exchanges_leak_nothing_and_finish_once(
    gateway_factory: GatewayFactory, sim: RunningSim
) -> None:
    gw = gateway_factory(sim.url, trace=True, **GATEWAY)
    clients = ClientLoop()
    try:
        run_state_machine_as_test(
            lambda: Exchanges(gw, sim, clients),
            settings=settings(
                max_examples=20,
                stateful_step_count=12,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        clients.close()
        set_faults(sim, NO_FAULTS)
