"""One gateway, several backends (real saber-sim servers): requests placed where they
are most likely to meet their deadline, each backend's health and load its own, a dead
backend ejected and taken back, and what other gateways run counted."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from gateway_support import SIM_TIME_SCALE, UNCAPPED, GatewayFactory
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from harness import free_port, metric_value, wait_for
from saber.gateway import RunningGateway
from saber.sim.http import RunningSim, serve_in_thread

SHORT = {"prompt": "def f():", "max_tokens": 24, "ignore_eos": True}


@pytest.fixture
def sims() -> Iterator[list[RunningSim]]:
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(serve_in_thread(time_scale=SIM_TIME_SCALE, max_num_seqs=512))
            for _ in range(2)
        ]


def backends(**urls: str) -> list[dict[str, str]]:
    return [{"name": name, "url": url} for name, url in urls.items()]


def served(sim_url: str) -> float:
    return metric_value(httpx.get(sim_url + "/metrics").text, "vllm:request_success_total")


def metrics(gw: RunningGateway) -> str:
    return httpx.get(gw.url + "/metrics").text


def complete(gw: RunningGateway, model: str) -> httpx.Response:
    return httpx.post(gw.url + "/v1/completions", json={"model": model, **SHORT}, timeout=30)


def running_stream(gw: RunningGateway, model: str) -> Iterator[Any]:
    """A stream of 4,000 tokens (1.6 s at the test time scale) through the openai SDK,
    returned once its first token has arrived: it is running at a backend."""
    client = OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
    stream = client.completions.create(
        model=model,
        prompt="def f():",
        max_tokens=4000,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks = iter(stream)
    next(chunks)
    return chunks


def test_requests_spread_over_the_backends_and_each_is_told_apart(
    gateway_factory: GatewayFactory, sims: list[RunningSim]
) -> None:
    a, b = sims
    gw = gateway_factory(a.url, backends=backends(left=a.url, right=b.url))
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: complete(gw, a.model), range(48)))
    assert [r.status_code for r in answers] == [200] * 48
    # Both engines served about evenly: a loaded backend keeps less of its f(1) at L + 1
    # than an idle twin, whatever either learned from single requests.
    left, right = served(a.url), served(b.url)
    assert left + right == 48 and min(left, right) >= 12, (left, right)
    text = metrics(gw)
    for name in ("left", "right"):
        assert metric_value(text, "saber_backend_up", backend=name) == 1
        assert metric_value(text, "saber_backend_in_flight", backend=name) == 0
        info = metric_value(text, "saber_backend_info", backend=name, kind="sim")
        assert info == 1
    status = httpx.get(gw.url + "/saber/status").json()
    assert [x["name"] for x in status["backends"]] == ["left", "right"]
    assert all(not x["ejected"] and x["load"] == 0 for x in status["backends"])
    health = httpx.get(gw.url + "/health").json()
    assert health["status"] == "ok" and len(health["backends"]) == 2
    assert "saber_affinity" not in families(text)  # affinity is off


def test_each_backend_shows_the_wait_for_a_first_token_while_it_serves(
    gateway_factory: GatewayFactory, sims: list[RunningSim]
) -> None:
    """What placement takes off a request's time left at each backend: the time to first
    token of its last stream to start answering, and 0 where nothing runs."""
    a, b = sims
    gw = gateway_factory(a.url, backends=backends(left=a.url, right=b.url))
    started = time.monotonic()
    chunks = running_stream(gw, a.model)
    ttft = time.monotonic() - started
    text = metrics(gw)
    waits = {
        n: metric_value(text, "saber_backend_first_token_wait_seconds", backend=n)
        for n in ("left", "right")
    }
    assert sorted(waits.values())[0] == 0, waits  # the other backend runs nothing
    assert 0 < max(waits.values()) <= ttft, (waits, ttft)
    for _ in chunks:
        pass
    wait_for(
        lambda: [
            metric_value(metrics(gw), "saber_backend_first_token_wait_seconds", backend=n)
            for n in ("left", "right")
        ],
        lambda now: now == [0, 0],
        describe="no wait shown once the backends are idle",
    )


def test_a_backend_serving_only_whole_answers_shows_its_engines_wait_for_first_tokens(
    gateway_factory: GatewayFactory, sims: list[RunningSim]
) -> None:
    """A request that is not streamed reports no first token to the gateway: the wait
    comes from the engine's own histogram of time to first token, read with its load."""
    a, b = sims
    gw = gateway_factory(
        a.url,
        backends=backends(left=a.url, right=b.url),
        **{"backend.metrics_interval_s": 0.1},
        **UNCAPPED,
    )
    client = OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)

    def ttft_sum(sim: RunningSim) -> float:
        return metric_value(
            httpx.get(sim.url + "/metrics").text, "vllm:time_to_first_token_seconds_sum"
        )

    def waits() -> dict[str, float]:
        text = metrics(gw)
        return {
            n: metric_value(text, "saber_backend_first_token_wait_seconds", backend=n)
            for n in ("left", "right")
        }

    # The wait is the histogram's growth between two reads: one read before the request.
    wait_for(
        lambda: httpx.get(gw.url + "/saber/status").json()["backends"],
        lambda bs: all(x["engine"]["scraped_age_s"] is not None for x in bs),
        describe="a first read of each backend's /metrics",
    )
    # 10,000 tokens: about 4 s of generation at the test time scale; it must still run
    # once two reads of /metrics, 0.1 s apart, show a wait (about 0.35 s in). 4,000
    # tokens (1.5 s) was under 5 times that.
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(
            client.completions.create,
            model=a.model,
            prompt="def f():",
            max_tokens=10_000,
            extra_body={"ignore_eos": True},
        )
        shown = wait_for(
            waits,
            lambda w: max(w.values()) > 0 or answer.done(),
            describe="a wait shown while the whole answer is made",
        )
        assert not answer.done(), "the answer came before a wait was shown"
        serving = max(shown, key=lambda n: shown[n])
        sim = a if serving == "left" else b
        # One request has made a first token there: the wait shown is its time to first
        # token as the engine measured it; the other backend shows none.
        assert shown[serving] == pytest.approx(ttft_sum(sim), rel=1e-6), shown
        assert shown["right" if serving == "left" else "left"] == 0, shown
        assert answer.result(timeout=30).usage.completion_tokens == 10_000
    wait_for(waits, lambda w: w == {"left": 0, "right": 0}, describe="no wait once idle")


def families(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}


def test_a_sessions_requests_stay_on_its_backend_with_affinity(
    gateway_factory: GatewayFactory, sims: list[RunningSim]
) -> None:
    a, b = sims
    gw = gateway_factory(
        a.url, backends=backends(left=a.url, right=b.url), **{"cluster.affinity_margin": 0.05}
    )
    client = OpenAI(base_url=gw.url + "/v1", api_key="sk-team", max_retries=0)
    homes = []
    for session in range(6):
        before = served(a.url), served(b.url)
        for _ in range(4):
            client.completions.create(
                model=a.model,
                prompt="def f():",
                max_tokens=24,
                extra_body={"ignore_eos": True},
                extra_headers={"x-session-id": f"editor-{session}"},
            )
        after = wait_for(
            lambda: (served(a.url), served(b.url)),
            lambda now, before=before: sum(now) == sum(before) + 4,
            describe="the session's four answers counted",
        )
        delta = [after[0] - before[0], after[1] - before[1]]
        assert sorted(delta) == [0, 4], (session, delta)  # all four on one backend
        homes.append(delta.index(4))
    # Each session whole on one backend, the sessions over both (without affinity,
    # placement alone splits a session's four requests between the twins).
    assert set(homes) == {0, 1}, homes
    # No session header (a key alone names a team, not a session): no affinity, and
    # nothing counted; with no key either, the same.
    client.completions.create(model=a.model, prompt="def f():", max_tokens=8)
    assert complete(gw, a.model).status_code == 200
    text = metrics(gw)
    assert "saber_affinity" in families(text)
    assert metric_value(text, "saber_affinity_total", result="kept") == 24
    assert metric_value(text, "saber_affinity_total", result="broken") == 0


def test_a_dead_backend_is_ejected_then_taken_back_when_it_answers(
    gateway_factory: GatewayFactory, sims: list[RunningSim]
) -> None:
    live = sims[0]
    port = free_port()
    dead = f"http://127.0.0.1:{port}"
    gw = gateway_factory(
        live.url,
        backends=backends(dead=dead, live=live.url),
        **{"backend.kind": "sim", "backend.eject_after": 2, "backend.eject_s": 0.3},
    )
    # Both idle and alike: the first in the list is preferred, so the dead one is tried
    # until it is ejected: after two requests refused, or sooner when reads of its
    # /metrics found nothing listening first.
    answers = [complete(gw, live.model) for _ in range(6)]
    codes = [r.status_code for r in answers]
    failed = codes.count(503)
    assert failed <= 2 and codes == [503] * failed + [200] * (6 - failed), codes
    assert all(int(r.headers["retry-after"]) >= 1 for r in answers[:failed])
    assert all(r.json()["error"]["type"] for r in answers[:failed])
    text = metrics(gw)
    assert metric_value(text, "saber_backend_up", backend="dead") == 0
    assert metric_value(text, "saber_backend_ejections_total", backend="dead") == 1
    errors = metric_value(text, "saber_backend_errors_total", backend="dead", kind="connect")
    assert errors == failed
    assert httpx.get(gw.url + "/health").json()["status"] == "ok"  # the live one serves
    # The dead backend comes up on its port: a probe of its /health takes it back.
    with serve_in_thread(time_scale=SIM_TIME_SCALE, port=port) as revived:
        wait_for(
            lambda: metric_value(metrics(gw), "saber_backend_up", backend="dead"),
            lambda up: up == 1,
            timeout=15,
            describe="the revived backend taken back",
        )
        # Two at once go one to each backend (the second to the idle one), whichever
        # of the two idle twins the first prefers: its speed is learned, the other's not.
        before = served(live.url)
        chunks = running_stream(gw, live.model)
        assert complete(gw, live.model).status_code == 200
        for _ in chunks:
            pass
        assert (served(revived.url), served(live.url) - before) == (1, 1)


def test_a_backend_with_nothing_listening_is_ejected_without_traffic(
    gateway_factory: GatewayFactory, sims: list[RunningSim]
) -> None:
    live = sims[0]
    dead = f"http://127.0.0.1:{free_port()}"
    gw = gateway_factory(
        live.url,
        backends=backends(dead=dead, live=live.url),
        **{"backend.kind": "sim", "backend.eject_after": 2, "backend.metrics_interval_s": 0.1},
    )
    wait_for(
        lambda: metric_value(metrics(gw), "saber_backend_up", backend="dead"),
        lambda up: up == 0,
        timeout=10,
        describe="the dead backend ejected from its /metrics reads alone",
    )
    assert metric_value(metrics(gw), "saber_backend_up", backend="live") == 1
    assert [complete(gw, live.model).status_code for _ in range(3)] == [200] * 3


def test_what_other_gateways_run_is_counted_after_a_scrape(
    gateway_factory: GatewayFactory, sims: list[RunningSim]
) -> None:
    sim = sims[0]
    gw = gateway_factory(
        sim.url, **{"cluster.gateways": 2, "cluster.headroom": 3, "backend.metrics_interval_s": 0.1}
    )
    long: dict[str, Any] = {"model": sim.model, "prompt": "x", "max_tokens": 20_000}
    with httpx.Client(timeout=10) as client, contextlib.ExitStack() as stack:
        for _ in range(4):  # another gateway's requests, as the engine sees them
            body = {**long, "ignore_eos": True, "stream": True}
            resp = stack.enter_context(
                client.stream("POST", sim.api_url + "/completions", json=body)
            )
            assert resp.status_code == 200

        def elsewhere() -> dict[str, int]:
            return httpx.get(gw.url + "/saber/status").json()["backends"][0]["elsewhere"]

        seen = wait_for(elsewhere, lambda e: e["seen"] == 4, describe="the others' four seen")
        assert seen["with_headroom"] == 4 + 3
        # This gateway's own request is not counted as another's.
        assert complete(gw, sim.model).status_code == 200
    wait_for(elsewhere, lambda e: e["seen"] == 0, describe="the others' requests gone")


def test_a_fixed_headroom_is_kept_from_the_start_and_bounds_each_interval(
    gateway_factory: GatewayFactory, sims: list[RunningSim]
) -> None:
    sim = sims[0]
    gw = gateway_factory(
        sim.url, **{"cluster.gateways": 2, "cluster.headroom": 3, "backend.metrics_interval_s": 0.1}
    )
    (backend,) = httpx.get(gw.url + "/saber/status").json()["backends"]
    assert backend["budget"] == {"sequences": 3, "interval_s": 0.1}  # 3 // (2 - 1)
    assert backend["elsewhere"]["with_headroom"] >= 3
    # Twelve at once: at most three start in any 0.1 s, and every one is answered.
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda _: complete(gw, sim.model), range(12)))
    assert [r.status_code for r in answers] == [200] * 12


class Unready(http.server.BaseHTTPRequestHandler):
    """A backend that listens but answers nothing it is asked (a 503): its /metrics is
    never read, yet nothing refuses a connection."""

    def do_GET(self) -> None:
        self.send_error(503)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def unready() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_stale_metrics_closed_keep_requests_off_a_backend_never_read(
    gateway_factory: GatewayFactory, sims: list[RunningSim], unready: str
) -> None:
    live = sims[0]
    gw = gateway_factory(
        live.url,
        backends=backends(dead=unready, live=live.url),
        **{
            "backend.kind": "sim",
            "backend.metrics_interval_s": 0.1,
            "cluster.stale": "closed",
        },
    )
    wait_for(
        lambda: metric_value(metrics(gw), "saber_backend_up", backend="dead"),
        lambda up: up == 0,
        describe="the backend whose /metrics never answered ejected",
    )
    # The first in the list, idle, yet nothing goes there: every request is served.
    assert [complete(gw, live.model).status_code for _ in range(4)] == [200] * 4
    assert metric_value(metrics(gw), "saber_backend_errors_total", backend="dead") == 0
    status = httpx.get(gw.url + "/saber/status").json()["backends"][0]
    assert status["stale_metrics"] and status["ejected"]
    assert status["breaker"]["state"] == "closed"  # out for its metrics, not its failures
