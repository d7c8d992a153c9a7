"""The relay under load: saber-sim directly, through saber-gateway, and through LiteLLM's
proxy where it is installed, from 1 to 1,024 concurrent streams.

saber-sim (a fast backend: ``--time-scale``), saber-gateway (the shipped settings,
with a profile that admits everything and no ``max_concurrency`` or ``queue_cap``, so
that only the relay is measured) and LiteLLM's proxy run as processes of their own;
the load comes from this process. At each level, ``level`` clients start at once (or
spread over ``--ramp`` seconds) and send ``--requests`` chat completions in all (each
client its next request when its last one ends), every one a stream of exactly
``--tokens`` tokens, to each path in turn (direct, gateway, litellm), ``--runs``
times. Per path it prints:

- chunks/s: SSE data events received per second by all clients, and its ratio to
  direct in the same run;
- CPU per chunk: the proxy process's CPU time over the chunks it relayed (direct:
  saber-sim's own);
- TTFT p50/p99: from sending the request to the first read that carries an event;
- gap p50/p99: between two reads of one stream that carry events (the inter-token
  gap a client measures), and the p99's excess over direct; ev/read: the events
  such a read carries, on average (what was merged on the way);
- errors: any status but 200, an error event, a stream without ``[DONE]`` or short
  of ``--tokens`` events, a client error. 0 is the only good number.

    .venv/bin/python bench/relay.py                                  # 1, 16, 64, 256, 1024
    .venv/bin/python bench/relay.py --levels 1024 --requests 2048 --runs 3
    .venv/bin/python bench/relay.py --levels 64 --time-scale 1 --requests 256 --ramp 5
    .venv/bin/python bench/relay.py --levels 64 --transport httpx    # the other upstream client
    .venv/bin/python bench/relay.py --litellm /tmp/litellm-venv/bin/litellm

LiteLLM's proxy is optional: ``python -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip
install 'litellm[proxy]'``, then pass its ``litellm`` command (or set ``LITELLM``).
Without it, that path is skipped and the script says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from array import array
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from overhead import cpu_seconds, permissive_profile

from harness import EngineProcess, free_port, gateway_process

EVENT = b"data: {"
DONE_TAIL = b"data: [DONE]\n\n"
LITELLM_DEFAULT = Path("/tmp/litellm-venv/bin/litellm")


@dataclass
class Tally:
    """What the clients of one path saw in one run."""

    requests: int = 0
    chunks: int = 0
    reads: int = 0  # reads that carried events
    seconds: float = 0.0
    ttft: array[float] = field(default_factory=lambda: array("d"))
    gaps: array[float] = field(default_factory=lambda: array("d"))
    errors: Counter[str] = field(default_factory=Counter)
    cpu: dict[str, float] = field(default_factory=dict)


async def one(session: aiohttp.ClientSession, url: str, body: bytes, want: int, t: Tally) -> None:
    """One streamed request: its TTFT, the gaps between reads that carry events, and
    whether it ended as it should."""
    sent = time.perf_counter()
    chunks, last, tail, error = 0, 0.0, b"", False
    try:
        async with session.post(url, data=body, headers={"content-type": "application/json"}) as r:
            if r.status != 200:
                await r.read()
                t.errors[f"http {r.status}"] += 1
                return
            async for data in r.content.iter_any():
                now = time.perf_counter()
                seen = tail + data
                if n := seen.count(EVENT):
                    if chunks:
                        t.gaps.append(now - last)
                    else:
                        t.ttft.append(now - sent)
                    last = now
                    chunks += n
                    t.reads += 1
                error = error or b'"error"' in seen
                tail = seen[-16:]
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        t.errors[f"client {type(exc).__name__}"] += 1
        return
    t.requests += 1
    t.chunks += chunks
    if error:
        t.errors["error event"] += 1
    elif not tail.endswith(DONE_TAIL):
        t.errors["no [DONE]"] += 1
    elif chunks < want:
        t.errors["short stream"] += 1


async def run_path(
    url: str,
    body: bytes,
    want: int,
    level: int,
    requests: int,
    pids: dict[str, int],
    ramp_s: float = 0.0,
) -> Tally:
    """``level`` clients share ``requests`` requests; client i starts ``ramp_s * i /
    level`` seconds in (0: all at once, a burst)."""
    t = Tally()
    left = requests
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def client(i: int) -> None:
            nonlocal left
            await asyncio.sleep(ramp_s * i / level)
            while left > 0:
                left -= 1
                await one(session, url, body, want, t)

        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        started = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(level)))
        t.seconds = time.perf_counter() - started
        t.cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    return t


def _loop_run(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:  # pragma: no cover
        return asyncio.run(coro)


def litellm_process(command: Path, sim: EngineProcess, workdir: Path) -> EngineProcess:
    """LiteLLM's proxy, one worker, the sim as an OpenAI-compatible model; no database,
    no telemetry, the model cost map that ships with the package."""
    config = workdir / "litellm.yaml"
    model = {"model": f"openai/{sim.model}", "api_base": sim.base_url + "/v1", "api_key": "x"}
    config.write_text(
        json.dumps(
            {
                "model_list": [{"model_name": sim.model, "litellm_params": model}],
                "litellm_settings": {"telemetry": False, "drop_params": True},
            }
        )
    )
    port = free_port()
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
        # No master key: a benchmark on 127.0.0.1, no auth on either side.
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    argv = [str(command), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
            "--num_workers", "1"]  # fmt: skip
    return EngineProcess(
        "litellm",
        argv,
        port=port,
        model=sim.model,
        env=env,
        log_path=workdir / "litellm.log",
        startup_timeout_s=180,
    )


def find_litellm(given: str | None) -> Path | None:
    for candidate in (given, os.environ.get("LITELLM"), str(LITELLM_DEFAULT)):
        if candidate and (path := Path(candidate)).exists():
            return path
        if candidate and (found := shutil.which(candidate)):
            return Path(found)
    return None


def pct(values: array[float], q: float) -> float:
    return float(np.percentile(np.frombuffer(values), q)) * 1000 if len(values) else float("nan")


def row(level: int, run: int, name: str, t: Tally, direct: Tally, proc: str) -> str:
    rate = t.chunks / t.seconds if t.seconds else 0.0
    base = direct.chunks / direct.seconds if direct.seconds else 0.0
    cpu_us = 1e6 * t.cpu.get(proc, 0.0) / t.chunks if t.chunks else float("nan")
    added = pct(t.gaps, 99) - pct(direct.gaps, 99)
    errors = sum(t.errors.values())
    said = ", ".join(f"{k} {v}" for k, v in t.errors.most_common()) if errors else ""
    return (
        f"{level:>7} | {run:>3} | {name:>7} | {t.requests:>8} | {rate:>8.0f} | "
        f"{rate / base if base else float('nan'):>5.2f} | {cpu_us:>10.1f} | "
        f"{pct(t.ttft, 50):>7.1f} / {pct(t.ttft, 99):>7.1f} | "
        f"{pct(t.gaps, 50):>6.2f} / {pct(t.gaps, 99):>6.2f} | {added:>+7.2f} | "
        f"{t.chunks / t.reads if t.reads else float('nan'):>7.1f} | {errors:>6}"
        + (f" ({said})" if said else "")
    )


HEADER = (
    f"{'streams':>7} | {'run':>3} | {'path':>7} | {'requests':>8} | {'chunks/s':>8} | "
    f"{'ratio':>5} | {'CPU us/chk':>10} | {'TTFT p50 / p99 ms':>17} | "
    f"{'gap p50 / p99 ms':>15} | {'+gap99':>7} | {'ev/read':>7} | {'errors':>6}"
)


def _errors(log: Path, lines: int = 3) -> str:
    """The gateway's last lines that are not a served request's, for a run with errors."""
    text = [line for line in log.read_text().splitlines() if '"outcome":"served"' not in line]
    return "\n".join(line[:600] for line in text[-lines:])


def _waits(log: Path, last: int) -> str:
    """Where the gateway's own TTFT went, from its log lines (``log_requests``) for the
    last ``last`` requests: the wait for admission, then the first token."""
    lines = [line for line in log.read_text().splitlines() if '"msg":"request"' in line]
    records = [json.loads(line) for line in lines[-last:]]
    queue = array("d", (r["queue_ms"] / 1000 for r in records if r.get("queue_ms") is not None))
    ttft = array("d", (r["ttft_ms"] / 1000 for r in records if r.get("ttft_ms") is not None))
    return (
        f"{'':>7}   gateway's log: queue p50/p99 {pct(queue, 50):.1f} / {pct(queue, 99):.1f} ms, "
        f"its TTFT p50/p99 {pct(ttft, 50):.1f} / {pct(ttft, 99):.1f} ms"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--levels", type=int, nargs="+", default=[1, 16, 64, 256, 1024])
    p.add_argument("--requests", type=int, default=0, help="per path and run (0: 2 x level, >= 16)")
    p.add_argument("--runs", type=int, default=1, help="runs per level")
    p.add_argument("--tokens", type=int, default=200, help="tokens of every stream")
    p.add_argument(
        "--ramp", type=float, default=0.0, help="seconds over which the clients start (0: at once)"
    )
    p.add_argument("--time-scale", type=float, default=20.0, help="saber-sim --time-scale")
    p.add_argument("--transport", choices=["httpx", "aiohttp"], default=None)
    p.add_argument("--litellm", default=None, help="LiteLLM's litellm command (or $LITELLM)")
    p.add_argument("--no-litellm", action="store_true", help="skip LiteLLM's proxy")
    p.add_argument("--keep", metavar="DIR", help="write the processes' logs there, and keep them")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="saber-relay-") as tmp, ExitStack() as stack:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        port = free_port()
        sim_argv = [
            sys.executable, "-m", "saber.sim.http", "--port", str(port),
            "--disable-uvicorn-access-log", "--uvicorn-log-level", "warning",
            "--time-scale", str(args.time_scale), "--max-num-seqs", str(max(args.levels)),
            "--output-len", f"fixed:{args.tokens}",
        ]  # fmt: skip
        sim = EngineProcess("sim", sim_argv, port=port, model="qwen2.5-coder-3b",
                            log_path=work / "sim.log")  # fmt: skip
        stack.enter_context(sim)
        settings: dict[str, Any] = {"max_concurrency": "null", "queue_cap": "null"}
        if args.transport:
            settings["backend.transport"] = args.transport
        gateway = gateway_process(
            model=sim.model,
            backend=sim.base_url,
            profile=permissive_profile(work / "open.json"),
            settings=settings,
            clean_env=True,
            log_path=work / "gateway.log",
        )
        stack.enter_context(gateway)
        paths = {"direct": (sim.base_url, "sim"), "gateway": (gateway.base_url, "gateway")}
        pids = {"sim": sim.pid, "gateway": gateway.pid, "client": os.getpid()}
        litellm = None if args.no_litellm else find_litellm(args.litellm)
        if args.no_litellm:
            print("LiteLLM's proxy: skipped (--no-litellm)\n")
        elif litellm is None:
            print(
                "LiteLLM's proxy: not found (--litellm, $LITELLM or "
                f"{LITELLM_DEFAULT}); its path is skipped. Install it with: python -m venv "
                "/tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'\n"
            )
        else:
            proxy = stack.enter_context(litellm_process(litellm, sim, work))
            paths["litellm"] = (proxy.base_url, "litellm")
            pids["litellm"] = proxy.pid
        transport = args.transport or "default (aiohttp)"
        print(
            f"saber-sim time scale {args.time_scale:g}, {args.tokens} tokens per stream, "
            f"gateway upstream client {transport}; {os.cpu_count()} CPUs shared by every "
            "process and the load generator; pids: "
            + ", ".join(f"{k} {v}" for k, v in pids.items())
            + "\n",
            flush=True,
        )
        print(HEADER)
        print("-" * len(HEADER))
        body = json.dumps(
            {
                "model": sim.model,
                "messages": [{"role": "user", "content": "def quicksort(xs):"}],
                "max_tokens": args.tokens,
                "stream": True,
            }
        ).encode()
        for level in args.levels:
            requests = args.requests or max(2 * level, 16)
            for run in range(1, args.runs + 1):
                seen: dict[str, Tally] = {}
                for name, (url, _) in paths.items():
                    seen[name] = _loop_run(
                        run_path(
                            url + "/v1/chat/completions", body, args.tokens, level, requests,
                            {k: v for k, v in pids.items() if v is not None}, args.ramp,
                        )
                    )  # fmt: skip
                for name, t in seen.items():
                    print(row(level, run, name, t, seen["direct"], paths[name][1]), flush=True)
                if seen["gateway"].errors:
                    print(_errors(gateway.log_path), flush=True)
                print(_waits(gateway.log_path, requests), flush=True)
        print(
            "\nratio = chunks/s over direct's in the same run; CPU us/chk = the proxy's CPU "
            "time per chunk it relayed (direct: saber-sim's); gap = between two reads of a "
            "stream that carry events; +gap99 = p99 gap minus direct's; ev/read = events per "
            "such read."
        )


if __name__ == "__main__":
    main()
