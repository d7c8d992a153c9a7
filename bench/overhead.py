"""What does saber-gateway add? TTFT and relayed SSE frames/s, against direct access.

One saber-sim and one saber-gateway run as separate processes (as deployed); the
load comes from this process. At each concurrency level, N clients keep N
streams open (each sends its next request when the last one ends), in phases
that alternate between going straight to saber-sim and going through the
gateway, so both see the same backend under the same conditions:

- added TTFT: the gateway's TTFT percentile minus the direct one (p50, p99);
  TTFT is from sending the request to the first content frame;
- frames/s: SSE frames received per second by all clients together.

The gateway gets a profile that admits everything (f(L) huge and flat), so what
is measured is the proxy's cost, not admission waiting.

    .venv/bin/python bench/overhead.py                      # 1, 32 and 128 streams
    .venv/bin/python bench/overhead.py --time-scale 20      # more frames per second
    .venv/bin/python bench/overhead.py --transport aiohttp  # the other upstream client

Targets at 128 streams: added TTFT p50 <= 0.5 ms, p99 <= 2 ms. On a small machine
the three processes share the cores, so the figures include CPU contention.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import numpy as np

from saber.speed import USLModel, build_profile, save_profile


@contextmanager
def process(
    cmd: list[str], pattern: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, int]]:
    """Start ``cmd``; yield the URL its stderr announces (first group of ``pattern``)
    and its pid."""
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if m := re.search(pattern, line):
                yield m.group(1), proc.pid
                return
        raise RuntimeError(f"{cmd[2]} did not start")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def sim_cmd(time_scale: float) -> list[str]:
    return [
        sys.executable, "-m", "saber.sim.http", "--port", "0", "--disable-uvicorn-access-log",
        "--time-scale", str(time_scale), "--max-num-seqs", "1024",
    ]  # fmt: skip


def gateway_cmd(sim_url: str, profile: Path, config: Path) -> list[str]:
    return [
        sys.executable, "-m", "saber.gateway.cli", "--config", str(config), "--port", "0",
        "--backend", sim_url, "--profile", str(profile), "--log-level", "info",
    ]  # fmt: skip


def permissive_profile(path: Path) -> Path:
    """f(L) = 1e6 tok/s at every load: every request is admitted at once."""
    model = USLModel(lam=1e6, sigma=0.0, kappa=0.0)
    loads = np.arange(1, 9, dtype=float)
    save_profile(
        build_profile(model, loads, model.predict(loads), backend="sim", model_name="x"), path
    )
    return path


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    ttft: list[float] = field(default_factory=list)
    frames: int = 0
    seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # process -> CPU seconds used

    def add(self, other: Sample) -> None:
        self.ttft += other.ttft
        self.frames += other.frames
        self.seconds += other.seconds
        for name, used in other.cpu.items():
            self.cpu[name] = self.cpu.get(name, 0.0) + used

    def share(self, name: str) -> float:
        """The process's CPU use, in % of one core, during these phases."""
        return 100 * self.cpu.get(name, 0.0) / self.seconds if self.seconds else 0.0


async def one_stream(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[float, int]:
    sent = time.perf_counter()
    ttft = float("nan")
    frames = 0
    async with session.post(url, data=body, headers={"content-type": "application/json"}) as r:
        r.raise_for_status()
        async for line in r.content:
            if line.startswith(b"data: {"):
                frames += 1
                if frames == 1:
                    ttft = time.perf_counter() - sent
    return ttft, frames


async def phase(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    streams: int,
    seconds: float,
    pids: dict[str, int],
) -> Sample:
    """``streams`` clients, each sending its next request as soon as the last one
    ends, for ``seconds``. Starts are spread over the first request's duration so
    that arrivals are staggered, as with real users; each client's first request
    is not counted."""
    sample = Sample()
    started = time.perf_counter()
    end = started + seconds
    typical = (await one_stream(session, url, body)) if streams > 1 else None
    spread = (time.perf_counter() - started) if typical else 0.0

    async def client(i: int) -> None:
        await asyncio.sleep(spread * i / streams)
        first = True
        while time.perf_counter() < end:
            ttft, frames = await one_stream(session, url, body)
            if not first:
                sample.ttft.append(ttft)
            first = False
            sample.frames += frames

    counted = time.perf_counter()
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    await asyncio.gather(*(client(i) for i in range(streams)))
    sample.seconds = time.perf_counter() - counted
    sample.cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    return sample


async def measure(
    sim_url: str,
    gw_url: str,
    model: str,
    streams: int,
    phases: int,
    seconds: float,
    tokens: int,
    pids: dict[str, int],
) -> tuple[Sample, Sample]:
    body = json.dumps(
        {
            "model": model,
            "prompt": "def quicksort(xs):",
            "max_tokens": tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    direct, via = Sample(), Sample()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(phases):  # alternate, so that drift hits both paths alike
            url = sim_url + "/v1/completions"
            direct.add(await phase(session, url, body, streams, seconds, pids))
            url = gw_url + "/v1/completions"
            via.add(await phase(session, url, body, streams, seconds, pids))
    return direct, via


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--levels", type=int, nargs="+", default=[1, 32, 128])
    p.add_argument("--time-scale", type=float, default=1.0, help="saber-sim --time-scale")
    p.add_argument("--tokens", type=int, default=32, help="max_tokens of each stream")
    p.add_argument("--seconds", type=float, default=5.0, help="length of one phase")
    p.add_argument("--phases", type=int, default=2, help="phases per path and level")
    p.add_argument("--transport", choices=["httpx", "aiohttp"], default=None)
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        profile = permissive_profile(Path(tmp) / "open.json")
        config = Path(tmp) / "gateway.yaml"
        config.write_text("log_requests: false\nmax_concurrency: null\nqueue_cap: null\n")
        env = dict(os.environ)
        if args.transport:
            env["SABER_BACKEND_TRANSPORT"] = args.transport
        with process(sim_cmd(args.time_scale), r"running on (http://\S+)") as (sim_url, sim_pid):
            model = _model(sim_url)
            cmd = gateway_cmd(sim_url, profile, config)
            with process(cmd, r'"url":"(http://[^"]+)"', env) as (gw, gw_pid):
                _wait_ready(gw)
                pids = {"sim": sim_pid, "gateway": gw_pid, "client": os.getpid()}
                transport = args.transport or "default (" + _default_transport() + ")"
                print(
                    f"saber-sim time scale {args.time_scale:g}, {args.tokens} tokens per stream, "
                    f"upstream client {transport}; {os.cpu_count()} CPUs shared by sim, gateway "
                    "and load generator\n"
                )
                header = (
                    f"{'streams':>7} | {'requests':>8} | {'TTFT direct p50/p99 ms':>22} | "
                    f"{'TTFT gateway p50/p99 ms':>23} | {'added p50/p99 ms':>16} | "
                    f"{'frames/s direct':>15} | {'frames/s gateway':>16} | "
                    f"{'CPU % sim/gw/client':>19}"
                )
                print(header)
                print("-" * len(header))
                for level in args.levels:
                    d, g = asyncio.run(
                        measure(
                            sim_url, gw, model, level, args.phases, args.seconds, args.tokens, pids
                        )
                    )
                    added50 = pct(g.ttft, 50) - pct(d.ttft, 50)
                    added99 = pct(g.ttft, 99) - pct(d.ttft, 99)
                    shares = "/".join(f"{g.share(n):.0f}" for n in ("sim", "gateway", "client"))
                    print(
                        f"{level:>7} | {len(d.ttft):>8} | "
                        f"{pct(d.ttft, 50):>10.2f} / {pct(d.ttft, 99):>9.2f} | "
                        f"{pct(g.ttft, 50):>10.2f} / {pct(g.ttft, 99):>10.2f} | "
                        f"{added50:>+7.2f} / {added99:>+6.2f} | "
                        f"{d.frames / d.seconds:>15.0f} | {g.frames / g.seconds:>16.0f} | "
                        f"{shares:>19}"
                    )
                print(
                    "\nadded = gateway percentile minus direct percentile. Each level runs "
                    f"{args.phases} x {args.seconds:g} s phases per path, alternating direct "
                    "and gateway;\nstreams = clients that each send the next request when the "
                    "last one ends; frames/s = SSE frames received per second, all clients;\n"
                    "CPU % = each process's CPU use during the gateway phases (100 = one core)."
                )


def _default_transport() -> str:
    from saber.config import BackendSettings

    return BackendSettings().transport


def _model(url: str) -> str:
    return httpx.get(url + "/v1/models").json()["data"][0]["id"]


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/metrics").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("saber-gateway did not become ready")


if __name__ == "__main__":
    main()
