"""The clients' own retries, against a full gateway whose slot frees several seconds later.

Three slots and one queue place per task: three long answers stream (600 tokens each,
several seconds on saber-sim at real speed), a short request waits in each client's
queue, and the gateway has learned that code_qna answers are short (20 tokens) or long
(600). Once the long ones have run past the mean (about 1 s), three clients ask,
each with its built-in retries as shipped: openai-python, openai-node 6 (Continue's
chat) and the AI SDK's openai-compatible provider (Cline). Each is turned away (429)
with a Retry-After.

With the previous Retry-After (each running request's expected tokens at admission,
less what it made: 1 s, since the long answer has made more than the mean), the
clients spend their retries in about 2 s and fail while the slot is still busy. With
the gateway's (when the running request will likely have ended, from its pace and
what it has made), they come back when the slot has freed, and are served.

The JavaScript half needs Node.js and npm: the packages are installed once into
``.cache/node-clients`` (git-ignored); without node, or without the npm registry, it
is skipped and the Python client still runs.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from gateway_support import UNCAPPED, GatewayFactory, call_in_loop

from harness import metric_value, wait_for
from saber.gateway import RunningGateway
from saber.sim.http import RunningSim, serve_in_thread

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
NODE_CLIENTS = REPO / ".cache" / "node-clients"
NODE_PACKAGES = ("openai@6", "@ai-sdk/openai-compatible@2", "ai@6")
CLIENT_JS = Path(__file__).with_name("clients") / "retrying_client.js"
LONG_TOKENS = 600
SLOTS = 3
SHORT, LONG = 20, LONG_TOKENS  # what code_qna answers have been


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[RunningSim]:
    """saber-sim at real speed: about 130 tokens/s for one request. Every answer runs to
    LONG_TOKENS unless capped, so a long one's length is the engine's to know, not the
    gateway's (with ``ignore_eos`` the gateway would know it exactly)."""
    with serve_in_thread(time_scale=1.0, output_len=f"fixed:{LONG_TOKENS}") as running:
        yield running


@pytest.fixture(scope="module")
def node_clients() -> Path | None:
    """The JavaScript clients' folder, installed if need be; None without Node.js."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return None
    marker = NODE_CLIENTS / "node_modules" / ".saber-packages"
    if marker.exists() and marker.read_text() == " ".join(NODE_PACKAGES):
        return NODE_CLIENTS
    NODE_CLIENTS.mkdir(parents=True, exist_ok=True)
    (NODE_CLIENTS / "package.json").write_text('{"private": true}\n')
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--silent", *NODE_PACKAGES],
        cwd=NODE_CLIENTS,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        return None
    marker.write_text(" ".join(NODE_PACKAGES))
    return NODE_CLIENTS


def previous_retry_after(gw: RunningGateway) -> Any:
    """The gateway's Retry-After before issue 15: the soonest, over running requests, of
    (tokens expected at admission - tokens made) at f(L), at least one token, in whole
    seconds within 1..120."""
    adm = gw.gateway.admission

    def retry_after(full: str | None = None) -> tuple[int, int]:
        sched = gw.gateway.scheduler
        running = sched.running()
        if not running:
            return 1, 1000
        now, speed = adm.now(), sched.predicted_speed(len(running))

        def made(r: Any) -> float:
            return r.generated if r.generated is not None else (now - r.admitted_at) * speed

        left = min(max(r.tokens - made(r), 1.0) for r in running)
        seconds = int(min(max(math.ceil(left / speed), 1), 120))
        return seconds, seconds * 1000

    return retry_after


def _streamed(url: str, body: dict[str, Any]) -> int:
    with httpx.stream("POST", url, json=body, timeout=60) as r:
        r.read()
        return r.status_code


def _fill(gw: RunningGateway, sim: RunningSim) -> list[concurrent.futures.Future[int]]:
    """The long answers streaming, then one short request queued for each client's task:
    when the long ones end, the three short ones go together and each queue has room."""
    url = gw.url + "/v1/chat/completions"
    messages = [{"role": "user", "content": "x"}]
    long = {"model": "chat", "messages": messages, "max_tokens": LONG_TOKENS}
    pool = concurrent.futures.ThreadPoolExecutor(SLOTS + 3)
    futures = [pool.submit(_streamed, url, {**long, "stream": True}) for _ in range(SLOTS)]
    wait_for(lambda: gw.gateway.scheduler.load, lambda n: n == SLOTS, describe="slots full")
    for model in ("chat", f"{sim.model}:code_summary", "generate"):
        short = {"model": model, "messages": messages, "max_tokens": 2}
        futures.append(pool.submit(_streamed, url, short))
    wait_for(lambda: gw.gateway.scheduler.queued(), lambda n: n == 3, describe="3 queued")
    pool.shutdown(wait=False)
    return futures


def progress(gw: RunningGateway) -> list[tuple[int, float]]:
    """Each running request's tokens so far, and the tokens expected of it at admission."""
    return [(r.generated or 0, r.tokens) for r in gw.gateway.scheduler.running()]


def _python_client(gw: RunningGateway, caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-test")  # 2 retries, as shipped
    started = time.monotonic()
    try:
        client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "x"}], max_tokens=4
        )
        served = True
    except openai.RateLimitError:
        served = False
    waits = [
        float(m.group(1))
        for r in caplog.records
        if (m := re.match(r"Retrying request in ([\d.]+) seconds", r.getMessage()))
    ]
    return {"kind": "openai-python", "served": served, "elapsed_s": time.monotonic() - started,
            "waits": waits}  # fmt: skip


def _round(gw: RunningGateway, sim: RunningSim, node: Path | None, caplog: Any) -> list[Any]:
    """Fill the gateway, let the long answer run past the short ones, send the clients."""
    fillers = _fill(gw, sim)
    # Past every short answer, and past what each was expected to make at its admission
    # (the mean of what code_qna's answers have been): about 1 s.
    wait_for(
        lambda: call_in_loop(gw, lambda: progress(gw)),
        lambda made: len(made) == SLOTS and all(n > expected for n, expected in made),
        timeout=30,
        describe="every long answer past the tokens expected of it (made, expected)",
    )
    procs = []
    if node is not None:
        env = {**os.environ, "CLIENTS_DIR": str(node)}
        for kind, model in (("openai", f"{sim.model}:code_summary"), ("ai-sdk", "generate")):
            argv = ["node", str(CLIENT_JS), kind, gw.url + "/v1", model]
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    caplog.clear()
    results = [_python_client(gw, caplog)]
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert [f.result() for f in fillers] == [200] * (SLOTS + 3)
    wait_for(lambda: gw.gateway.admission.active, lambda n: n == 0, timeout=30, describe="idle")
    return results


def test_the_clients_retries_are_served_once_the_slot_frees(
    gateway_factory: GatewayFactory,
    slow_sim: RunningSim,
    node_clients: Path | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="openai")
    gw = gateway_factory(slow_sim.url, max_concurrency=SLOTS, queue_cap=1, **UNCAPPED)

    def learn() -> None:
        for i in range(2000):  # what a gateway learns from its traffic
            gw.gateway.scheduler.lengths.observe("code_qna", LONG if i % 5 == 0 else SHORT)

    call_in_loop(gw, learn)

    # Before: the previous Retry-After.
    gw.gateway.admission.retry_after = previous_retry_after(gw)  # type: ignore[method-assign]
    before = _round(gw, slow_sim, node_clients, caplog)
    del gw.gateway.admission.retry_after
    # After: the gateway's.
    after = _round(gw, slow_sim, node_clients, caplog)

    text = httpx.get(gw.url + "/metrics").text
    checked = metric_value(text, "saber_retry_after_observed_over_predicted_count")
    on_time = metric_value(text, "saber_retry_after_observed_over_predicted_bucket", le="1.0")
    print("\nbefore:", json.dumps(before, indent=1))
    print("after:", json.dumps(after, indent=1))
    print(f"Retry-After checked {checked:.0f} times, slot freed by then {on_time:.0f} times")
    assert [r["served"] for r in before] == [False] * len(before)
    assert [r["served"] for r in after] == [True] * len(after)
    if node_clients is None:
        pytest.skip("the Python client passed; Node.js or npm is missing for the JavaScript ones")
    assert {r["kind"] for r in after} == {"openai-python", "openai", "ai-sdk"}
