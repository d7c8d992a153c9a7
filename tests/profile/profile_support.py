"""Helpers for the saber-profile tests (imported as a module; fixtures live in conftest)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import numpy as np
import pytest

from harness import free_port
from saber.engine import PAPER, Engine, EngineRequest
from saber.profile.cli import main


def write_dataset(
    path: Path,
    n: int = 400,
    prompt: tuple[int, int] = (24, 40),
    output: tuple[int, int] = (32, 64),
    seed: int = 0,
) -> Path:
    """A JSONL dataset with lengths drawn uniformly from the given inclusive ranges.

    Narrow ranges keep the speeds at one load close together, so a few points
    per level pin the curve down and the tests stay short.
    """
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as fh:
        for _ in range(n):
            record = {
                "prompt_tokens": int(rng.integers(prompt[0], prompt[1] + 1)),
                "output_tokens": int(rng.integers(output[0], output[1] + 1)),
            }
            fh.write(json.dumps(record) + "\n")
    return path


def read_lengths(path: Path) -> list[tuple[int, int]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(r["prompt_tokens"], r["output_tokens"]) for r in rows]


def engine_truth(lengths: Sequence[tuple[int, int]], level: int, n: int = 200) -> np.ndarray:
    """Per-request speeds (tokens/s, engine time) of the engine model held at ``level``.

    The paper preset in virtual time, the same closed loop saber-profile runs:
    each finish is replaced at once, the first ``level`` finishes are warm-up,
    speed = output tokens / (arrival to last token).
    """
    engine = Engine(PAPER, max_num_seqs=max(256, level))
    started: dict[str, float] = {}
    speeds: list[float] = []
    now, nxt, warmup = 0.0, 0, level

    def start(at: float) -> None:
        nonlocal nxt
        prompt, output = lengths[nxt % len(lengths)]
        rid = f"r{nxt}"
        nxt += 1
        engine.add(EngineRequest(rid, prompt, output, arrival=at))
        started[rid] = at

    for _ in range(level):
        start(now)
    while len(speeds) < n:
        step = engine.step(now, max_steps=1 << 30)
        assert step is not None
        now = step.end
        for done in step.finished:
            if warmup:
                warmup -= 1
            else:
                speeds.append(done.output_tokens / (now - started[done.id]))
            start(now)
    return np.asarray(speeds)


def run_cli(args: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run saber-profile in this process; (exit code, stdout, stderr)."""
    code = main([*args, "--no-progress"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@contextlib.contextmanager
def sim_process(time_scale: float, *extra: str) -> Iterator[str]:
    """saber-sim in its own process (so it does not share a GIL with the profiler)."""
    port = free_port()
    argv = [sys.executable, "-m", "saber.sim.http", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--time-scale", str(time_scale), "--uvicorn-log-level", "warning", *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"saber-sim exited with {proc.returncode}")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("saber-sim did not start")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
