"""Soak: the gateway under twice its capacity, with everything going wrong, loses nothing.

saber-sim and saber-gateway run as separate processes (as deployed); the load comes
from this process. After a warm-up that measures the capacity (``max_concurrency``
closed-loop clients, all admitted), requests arrive as a Poisson process at twice
that rate for the duration, a mix of the shipped task types, half of them streams.
Meanwhile:

- clients hang up at random (``--disconnect``, at a random moment within 3 s of
  sending the request: while queued or while running);
- saber-sim answers a share of requests 500 and stalls another (its fault API:
  ``--error-rate``, ``--stall-prob``; a stall meets the gateway's read timeout);
- saber-sim is killed (SIGKILL) and started again, twice (at 30% and 60%);
- the config is changed and the gateway sent SIGHUP once (at 45%).

At the end it waits for every client and for the gateway to be idle, then prints:
requests sent; requests counted by the gateway (``saber_requests_total``), by
outcome; lost (sent minus counted: must be 0); in flight at the end (running,
queued or still known to admission: must be 0); the gateway's RSS and open file
descriptors at the start (after the warm-up, idle) and at the end (idle), and the
RSS the soak added per 10,000 of its requests (what a gateway keeps per request).

    .venv/bin/python bench/soak.py                    # 10 minutes
    .venv/bin/python bench/soak.py --duration 60      # what tests/bench/test_soak.py runs
    .venv/bin/python bench/soak.py --json             # the summary as one JSON object
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx
import yaml

from saber.config import DEFAULT_GATEWAY_CONFIG, DEFAULT_PROFILE_DIR
from saber.speed import USLModel, load_profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness import EngineProcess, free_port, gateway_process, write_profile

# Task types, how often each arrives, and the mean answer asked for (max_tokens is
# drawn around it, at most the task's own cap); the engine generates all of it.
MIX = {
    "code_completion": (0.35, 24),
    "code_qna": (0.25, 40),
    "code_summary": (0.2, 30),
    "code_generation": (0.15, 120),
    "code_translation": (0.05, 200),
}
CAPS = {"code_completion": 64, "code_qna": 256, "code_summary": 128}
BACKEND_READ_TIMEOUT_S = 4.0  # a stalled stream meets it: backend_timeout
CLIENT_TIMEOUT_S = 120.0


@dataclass
class Plan:
    duration_s: float
    time_scale: float
    max_concurrency: int
    overload: float
    disconnect: float
    error_rate: float
    stall_prob: float
    seed: int
    warmup_s: float = 10.0


@dataclass
class Tally:
    sent: int = 0
    client: Counter[str] = field(default_factory=Counter)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        m = re.match(r"^([a-z_:]+)(?:\{(.*)\})? (\S+)$", line)
        if m:
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def counted(url: str) -> Counter[str]:
    by: Counter[str] = Counter()
    for (name, labels), value in metrics(url).items():
        if name == "saber_requests_total" and value:
            by[dict(labels)["outcome"]] += int(value)
    return by


def in_flight(url: str) -> int:
    m = metrics(url)
    running = m.get(("saber_requests_in_flight", ()), 0)
    queued = sum(v for (n, _), v in m.items() if n == "saber_queue_depth")
    active = httpx.get(url + "/saber/status", timeout=10).json()["gateway"]["requests_active"]
    return int(running + queued + active)


def wait_idle(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and in_flight(url):
        time.sleep(0.2)


# -- the processes -----------------------------------------------------------------


def scaled_profile(path: Path, time_scale: float) -> Path:
    """The profile shipped for saber-sim's paper preset, sped up by the time scale."""
    shipped = load_profile(DEFAULT_PROFILE_DIR / "saber-sim-paper.json").speed_model()
    assert isinstance(shipped, USLModel)
    p = shipped.params
    return write_profile(
        path, USLModel(lam=p["lam"] * time_scale, sigma=p["sigma"], kappa=p["kappa"])
    )


def write_config(path: Path, plan: Plan, backend: str, profile: Path, qna_sla_s: float) -> Path:
    data = yaml.safe_load(DEFAULT_GATEWAY_CONFIG.read_text())
    data.update(
        backend={
            **data["backend"],
            "url": backend,
            "kind": "sim",
            "read_timeout_s": BACKEND_READ_TIMEOUT_S,
        },
        profile=str(profile),
        max_concurrency=plan.max_concurrency,
        queue_cap=4 * plan.max_concurrency,
        queued_comment_interval_s=1.0,
        log_requests=False,
        seed=plan.seed,
    )
    data["tasks"]["code_qna"]["sla_s"] = qna_sla_s
    path.write_text(yaml.safe_dump(data))
    return path


@contextmanager
def processes(plan: Plan, workdir: Path) -> Iterator[tuple[EngineProcess, EngineProcess, Path]]:
    sim_port = free_port()
    sim_argv = [
        sys.executable, "-m", "saber.sim.http", "--port", str(sim_port),
        "--time-scale", str(plan.time_scale), "--max-num-seqs", "512",
        "--seed", str(plan.seed), "--uvicorn-log-level", "warning", "--disable-uvicorn-access-log",
    ]  # fmt: skip
    sim = EngineProcess(
        "sim", sim_argv, port=sim_port, model="qwen2.5-coder-3b", log_path=workdir / "sim.log"
    )
    profile = scaled_profile(workdir / "profile.json", plan.time_scale)
    config = write_config(workdir / "gateway.yaml", plan, sim.base_url, profile, 1.0)
    gateway = gateway_process(
        model=sim.model, config=config, clean_env=True, log_path=workdir / "gateway.log"
    )
    sim.start()
    try:
        gateway.start()
        try:
            yield sim, gateway, config
        finally:
            gateway.stop(grace_s=10)
    finally:
        sim.stop(grace_s=5)


def set_faults(sim: EngineProcess, plan: Plan) -> None:
    faults = {"error_rate": plan.error_rate, "stall_prob": plan.stall_prob, "stall_after": 3}
    httpx.post(sim.base_url + "/sim/faults", json=faults, timeout=10).raise_for_status()


# -- the load ------------------------------------------------------------------------


def request(rng: random.Random, model: str) -> tuple[dict[str, Any], dict[str, str], bool]:
    task = rng.choices(list(MIX), weights=[w for w, _ in MIX.values()])[0]
    mean = MIX[task][1]
    tokens = max(1, min(int(rng.expovariate(1 / mean)) + 1, CAPS.get(task, 1024)))
    stream = rng.random() < 0.5
    body = {
        "model": model,
        "prompt": "def f(x):",
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": stream,
    }
    return body, {"x-saber-task": task}, stream


async def _body_sent(
    _: aiohttp.ClientSession, ctx: SimpleNamespace, __: aiohttp.TraceRequestChunkSentParams
) -> None:
    if ctx.trace_request_ctx is not None:
        ctx.trace_request_ctx["sent"].set()


def tracing() -> aiohttp.TraceConfig:
    """Tells each request's ``sent`` event (its ``trace_request_ctx``) once its body
    has been handed to the connection: from then on the gateway gets the request
    whenever the client hangs up."""
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_body_sent)
    return trace


async def hang_up_after(answer: asyncio.Task[str], sent: asyncio.Event, seconds: float) -> str:
    """``answer``'s result, unless it takes more than ``seconds`` from when its request
    was sent: the client hangs up then (TimeoutError). Timed from the send, not the
    call: a client that gave up before its request left never reached the gateway,
    which has nothing to count for it, and the soak would call it lost."""
    sending = asyncio.ensure_future(sent.wait())
    await asyncio.wait((answer, sending), return_when=asyncio.FIRST_COMPLETED)
    sending.cancel()
    if answer.done():
        return answer.result()
    return await asyncio.wait_for(answer, seconds)


async def one(
    session: aiohttp.ClientSession,
    url: str,
    spec: tuple[dict[str, Any], dict[str, str], bool],
    hang_up: float | None,
    tally: Tally,
) -> None:
    body, headers, stream = spec
    tally.sent += 1
    sent = asyncio.Event()

    async def exchange() -> str:
        async with session.post(
            url, json=body, headers=headers, trace_request_ctx={"sent": sent}
        ) as resp:
            if not stream or not resp.headers.get("content-type", "").startswith(
                "text/event-stream"
            ):
                await resp.read()
                return f"http {resp.status}"
            last, error = b"", False
            async for line in resp.content:
                if line.strip():
                    last = line.strip()
                    error = error or last.startswith(b'data: {"error"')
            if last != b"data: [DONE]":
                return "stream cut"  # must never happen
            return "stream error event" if error else "stream done"

    try:
        if hang_up is None:
            tally.client[await exchange()] += 1
        else:
            answer = asyncio.ensure_future(exchange())
            tally.client[await hang_up_after(answer, sent, hang_up)] += 1
    except TimeoutError:
        tally.client["hung up"] += 1
    except (aiohttp.ClientError, OSError) as exc:
        tally.client[f"client error {type(exc).__name__}"] += 1


async def closed_loop(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    n: int,
    seconds: float,
    rng: random.Random,
    tally: Tally,
) -> int:
    """``n`` clients back to back for ``seconds``; the requests answered 200."""
    end = time.monotonic() + seconds
    done = 0

    async def client() -> None:
        nonlocal done
        while time.monotonic() < end:
            body, headers, _ = request(rng, model)
            body["stream"] = False
            tally.sent += 1
            async with session.post(url, json=body, headers=headers) as resp:
                await resp.read()
                tally.client[f"http {resp.status}"] += 1
                done += resp.status == 200

    await asyncio.gather(*(client() for _ in range(n)))
    return done


async def open_loop(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    rate: float,
    seconds: float,
    plan: Plan,
    rng: random.Random,
    tally: Tally,
) -> None:
    end = time.monotonic() + seconds
    while (now := time.monotonic()) < end:
        await asyncio.sleep(min(rng.expovariate(rate), end - now))
        hang_up = rng.uniform(0.0, 3.0) if rng.random() < plan.disconnect else None
        task = asyncio.create_task(one(session, url, request(rng, model), hang_up, tally))
        tally.tasks.add(task)
        task.add_done_callback(tally.tasks.discard)


async def chaos(
    sim: EngineProcess, gateway: EngineProcess, config: Path, plan: Plan, start: float
) -> list[str]:
    """Kill and restart the backend at 30% and 60%; reload the gateway at 45%."""
    done: list[str] = []
    events = [(0.30, "restart"), (0.45, "reload"), (0.60, "restart")]
    for at, what in events:
        await asyncio.sleep(max(start + at * plan.duration_s - time.monotonic(), 0))
        if what == "restart":
            await asyncio.to_thread(sim.stop, 0)  # SIGKILL, as a crash
            await asyncio.sleep(2.0)
            await asyncio.to_thread(sim.start)
            await asyncio.to_thread(set_faults, sim, plan)
            done.append(f"backend killed and restarted at {time.monotonic() - start:.0f} s")
        else:
            data = yaml.safe_load(config.read_text())
            data["tasks"]["code_qna"]["sla_s"] = 1.2
            config.write_text(yaml.safe_dump(data))
            gateway.send_signal(signal.SIGHUP)
            done.append(f"SIGHUP reload at {time.monotonic() - start:.0f} s")
    return done


async def soak(
    plan: Plan, sim: EngineProcess, gateway: EngineProcess, config: Path
) -> dict[str, Any]:
    rng = random.Random(plan.seed)
    url = gateway.base_url + "/v1/completions"
    pid = gateway.pid
    assert pid is not None
    tally = Tally()
    timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)
    # force_close: a hang-up closes its own connection, as an editor's does.
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(
        timeout=timeout, connector=connector, trace_configs=[tracing()]
    ) as session:
        served = await closed_loop(
            session, url, sim.model, plan.max_concurrency, plan.warmup_s, rng, tally
        )
        capacity = served / plan.warmup_s
        rate = plan.overload * capacity
        set_faults(sim, plan)
        # A short run at the soak's rate, so that the start is measured warm.
        await open_loop(session, url, sim.model, rate, plan.warmup_s, plan, rng, tally)
        if tally.tasks:
            await asyncio.wait(list(tally.tasks), timeout=CLIENT_TIMEOUT_S + 10)
        await asyncio.to_thread(wait_idle, gateway.base_url)
        await asyncio.sleep(5.0)  # idle upstream connections expire after 4 s
        start = {"rss_mb": rss_mb(pid), "fds": open_fds(pid)}
        sent_before = tally.sent
        began = time.monotonic()
        events = asyncio.create_task(chaos(sim, gateway, config, plan, began))
        await open_loop(session, url, sim.model, rate, plan.duration_s, plan, rng, tally)
        happened = await events
        if tally.tasks:
            await asyncio.wait(list(tally.tasks), timeout=CLIENT_TIMEOUT_S + 10)
    await asyncio.to_thread(wait_idle, gateway.base_url)
    await asyncio.sleep(5.0)
    end = {"rss_mb": rss_mb(pid), "fds": open_fds(pid)}
    soaked = tally.sent - sent_before
    by = counted(gateway.base_url)
    total = sum(by.values())
    log = gateway.log_path.read_text()
    return {
        "duration_s": plan.duration_s,
        "time_scale": plan.time_scale,
        "max_concurrency": plan.max_concurrency,
        "capacity_rps": round(capacity, 2),
        "rate_rps": round(rate, 2),
        "sent": tally.sent,
        "counted": total,
        "lost": tally.sent - total,
        "by_outcome": dict(by.most_common()),
        "client": dict(tally.client.most_common()),
        "in_flight_end": in_flight(gateway.base_url),
        "rss_mb": {"start": round(start["rss_mb"], 1), "end": round(end["rss_mb"], 1)},
        # What the soak added, per 10,000 of its requests: flat if nothing is kept per request.
        "rss_mb_per_10k": round((end["rss_mb"] - start["rss_mb"]) / max(soaked, 1) * 1e4, 2),
        "soak_requests": soaked,
        "fds": {"start": start["fds"], "end": end["fds"]},
        "events": happened,
        "reloaded": log.count("settings reloaded"),
        "gateway_errors": log.count('"level":"error"'),
    }


def run(plan: Plan) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="saber-soak-") as tmp,
        processes(plan, Path(tmp)) as (sim, gateway, config),
    ):
        return asyncio.run(soak(plan, sim, gateway, config))


def report(r: dict[str, Any]) -> str:
    rss, fds = r["rss_mb"], r["fds"]
    growth = (rss["end"] / rss["start"] - 1) * 100
    lines = [
        f"soak: {r['duration_s']:.0f} s at {r['rate_rps']:.1f} req/s (twice the measured "
        f"capacity, {r['capacity_rps']:.1f} req/s), saber-sim time scale {r['time_scale']:g}, "
        f"max_concurrency {r['max_concurrency']}",
        f"sent {r['sent']:,}   counted {r['counted']:,}   lost {r['lost']}   "
        f"in flight at the end {r['in_flight_end']}",
        "counted by outcome: " + ", ".join(f"{k} {v:,}" for k, v in r["by_outcome"].items()),
        "as the clients saw it: " + ", ".join(f"{k} {v:,}" for k, v in r["client"].items()),
        "events: " + "; ".join(r["events"]) + f"; reloads applied: {r['reloaded']}",
        f"gateway RSS start {rss['start']:.1f} MB, end {rss['end']:.1f} MB ({growth:+.1f}%, "
        f"{r['rss_mb_per_10k']:+.2f} MB per 10k of the soak's {r['soak_requests']:,} requests); "
        f"open fds start {fds['start']}, end {fds['end']}; error log lines "
        f"{r['gateway_errors']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    p.add_argument("--time-scale", type=float, default=2.0, help="saber-sim's (default 2)")
    p.add_argument("--max-concurrency", type=int, default=12, help="the gateway's (default 12)")
    p.add_argument("--overload", type=float, default=2.0, help="times the capacity (default 2)")
    p.add_argument("--disconnect", type=float, default=0.05, help="share hung up (0.05)")
    p.add_argument("--error-rate", type=float, default=0.02, help="saber-sim's 500s (0.02)")
    p.add_argument("--stall-prob", type=float, default=0.01, help="saber-sim's stalls (0.01)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    plan = Plan(
        duration_s=args.duration,
        time_scale=args.time_scale,
        max_concurrency=args.max_concurrency,
        overload=args.overload,
        disconnect=args.disconnect,
        error_rate=args.error_rate,
        stall_prob=args.stall_prob,
        seed=args.seed,
    )
    result = run(plan)
    print(json.dumps(result) if args.json else report(result))
    ok = result["lost"] == 0 and result["in_flight_end"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
