"""Which upstream client should the gateway use? httpx's own pool against aiohttp
under httpx (httpx-aiohttp), at 32, 128 and 512 concurrent streams.

httpx's connection pool is known to be slow with hundreds of concurrent requests
(encode/httpx#3215). This script measures both transports the gateway can use
(``backend.transport: httpx | aiohttp``) the way the gateway uses them: one
shared ``httpx.AsyncClient``, streaming SSE responses read chunk by chunk.

The upstream is a stub SSE server in a separate process (uvicorn, raw ASGI), so
that only the client differs: each request gets ``--frames`` chunks of a
vLLM-sized SSE frame, ``--gap-ms`` apart (0: as fast as possible). Reported per
transport and level: time to response headers (p50/p99, where pool overhead
shows), time to the last frame (p50/p99), frames/s, and the client process's CPU
time per frame.

    .venv/bin/python bench/upstream_client.py
    .venv/bin/python bench/upstream_client.py --gap-ms 0 --frames 200
    .venv/bin/python bench/upstream_client.py --serve 8001    # just the stub server
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

FRAME = (
    b'data: {"id":"cmpl-0123456789abcdef","object":"text_completion","created":1700000000,'
    b'"model":"qwen2.5-coder-3b","choices":[{"index":0,"text":" token","logprobs":null,'
    b'"finish_reason":null,"stop_reason":null}],"usage":null}\n\n'
)
DONE = b"data: [DONE]\n\n"


# -- the stub upstream -------------------------------------------------------------


async def stub_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """POST anything: ``max_tokens`` SSE frames, ``STUB_GAP_MS`` apart, then [DONE]."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    frames = int(json.loads(body or b"{}").get("max_tokens", 32))
    gap = float(os.environ.get("STUB_GAP_MS", "0")) / 1000
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for _ in range(frames):
        if gap:
            await asyncio.sleep(gap)
        await send({"type": "http.response.body", "body": FRAME, "more_body": True})
    await send({"type": "http.response.body", "body": DONE, "more_body": False})


def serve_stub(port: int) -> None:
    import uvicorn

    print(f"stub running on http://127.0.0.1:{port}", file=sys.stderr, flush=True)
    uvicorn.run(
        stub_app, host="127.0.0.1", port=port, log_level="warning", access_log=False, backlog=4096
    )


@contextmanager
def stub_process(gap_ms: float) -> Iterator[str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "STUB_GAP_MS": str(gap_ms)}
    cmd = [sys.executable, __file__, "--serve", str(port)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if m := re.search(r"running on (http://\S+)", line):
                url = m.group(1)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    try:
                        httpx.post(url, json={"max_tokens": 1})
                        break
                    except httpx.HTTPError:
                        time.sleep(0.05)
                yield url
                return
        raise RuntimeError("the stub did not start")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- the clients ---------------------------------------------------------------------


def make_client(kind: str, limit: int) -> httpx.AsyncClient:
    """Built as the gateway builds it (saber.gateway.upstream.client.make_client)."""
    from saber.config import BackendSettings
    from saber.gateway.upstream.client import make_client as gateway_client

    return gateway_client(BackendSettings(transport=kind, max_connections=max(limit, 1024)))  # type: ignore[arg-type]


@dataclass
class Result:
    headers: list[float]
    last: list[float]
    frames: int
    wall: float
    cpu: float


async def one(client: httpx.AsyncClient, url: str, body: bytes) -> tuple[float, float, int]:
    start = time.perf_counter()
    frames = 0
    req = client.build_request(
        "POST", url, content=body, headers={"content-type": "application/json"}
    )
    resp = await client.send(req, stream=True)
    headers_at = time.perf_counter() - start
    try:
        async for chunk in resp.aiter_bytes():
            frames += chunk.count(b"\n\n")
    finally:
        await resp.aclose()
    return headers_at, time.perf_counter() - start, frames


async def run_level(kind: str, url: str, level: int, frames: int, rounds: int) -> Result:
    body = json.dumps({"max_tokens": frames}).encode()
    async with make_client(kind, level) as client:
        await asyncio.gather(*(one(client, url, body) for _ in range(level)))  # warm the pool
        heads: list[float] = []
        lasts: list[float] = []
        total = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(rounds):
            results = await asyncio.gather(*(one(client, url, body) for _ in range(level)))
            heads += [h for h, _, _ in results]
            lasts += [t for _, t, _ in results]
            total += sum(n for _, _, n in results)
        return Result(heads, lasts, total, time.perf_counter() - wall0, time.process_time() - cpu0)


def _loop_run(coro: Any) -> Any:
    if os.environ.get("BENCH_LOOP") == "asyncio":
        return asyncio.run(coro)
    try:
        import uvloop

        return uvloop.run(coro)  # the gateway runs on uvloop
    except ImportError:  # pragma: no cover
        return asyncio.run(coro)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--levels", type=int, nargs="+", default=[32, 128, 512])
    p.add_argument("--frames", type=int, default=64, help="SSE frames per stream")
    p.add_argument("--gap-ms", type=float, default=10.0, help="between frames; 0: no pause")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--serve", type=int, metavar="PORT", help="only run the stub server")
    args = p.parse_args()
    if args.serve:
        serve_stub(args.serve)
        return
    ms = 1000.0
    with stub_process(args.gap_ms) as url:
        print(
            f"stub upstream: {args.frames} frames per stream, {args.gap_ms:g} ms apart; "
            f"{args.rounds} rounds per level; {os.cpu_count()} CPUs shared with the stub\n"
        )
        header = (
            f"{'transport':>9} | {'streams':>7} | {'headers p50/p99 ms':>18} | "
            f"{'last frame p50/p99 ms':>21} | {'frames/s':>9} | {'CPU us/frame':>12}"
        )
        print(header)
        print("-" * len(header))
        for level in args.levels:
            for kind in ("httpx", "aiohttp"):
                r = _loop_run(run_level(kind, url, level, args.frames, args.rounds))
                h50, h99 = np.percentile(r.headers, [50, 99]) * ms
                l50, l99 = np.percentile(r.last, [50, 99]) * ms
                print(
                    f"{kind:>9} | {level:>7} | {h50:>8.1f} / {h99:>7.1f} | "
                    f"{l50:>10.1f} / {l99:>8.1f} | "
                    f"{r.frames / r.wall:>9.0f} | {r.cpu / r.frames * 1e6:>12.1f}"
                )


if __name__ == "__main__":
    main()
