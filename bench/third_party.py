"""aiperf and guidellm, offline, straight to the backend and through saber-gateway,
side by side. How and why: bench/third_party.md.

    .venv/bin/python bench/third_party.py [--tool aiperf|guidellm|both]
        [--concurrency 4] [--requests 64] [--isl 128] [--osl 64]
        [--backend URL --model NAME] [--tokenizer DIR]

Without ``--backend`` it starts saber-sim (serving ``tiny``) on a free port; it always
starts a saber-gateway (the shipped config, its default profile) in front of the
backend. Each tool is installed once, pinned, in a virtualenv of its own under the
cache (``harness.cache_dir()/third-party``). Both need a tokenizer: by default
the tiny one the project writes for its real-engine tests
(``harness.ensure_hf_model``), a directory; no hub is reached.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness import cache_dir, free_port
from harness._cache import is_ready
from harness._vllm import HF_MODEL_VERSION, ensure_hf_model

TOOLS = {"aiperf": "aiperf==0.13.0", "guidellm": "guidellm==0.8.1"}


def tool(name: str) -> Path:
    """The tool's command, installed into its own virtualenv if missing (a few minutes)."""
    root = cache_dir() / "third-party" / TOOLS[name].replace("==", "-")
    command = root / "bin" / name
    if not command.exists():
        print(f"installing {TOOLS[name]} into {root} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
        pip = [str(root / "bin" / "python"), "-m", "pip", "install", "-q", TOOLS[name]]
        subprocess.run(pip, check=True)
    return command


def tokenizer(given: str | None) -> Path:
    if given:
        return Path(given)
    cached = cache_dir() / "models" / f"tiny-hf-llama-v{HF_MODEL_VERSION}-seed0"
    return cached if is_ready(cached) else ensure_hf_model()


@contextlib.contextmanager
def process(argv: list[str], health: str, env: dict[str, str] | None = None) -> Iterator[None]:
    """A server process, until its ``health`` URL answers 200; stopped on the way out."""
    with tempfile.TemporaryFile() as log:
        yield from _serving(argv, health, env, log)


def _serving(argv: list[str], health: str, env: dict[str, str] | None, log: Any) -> Iterator[None]:
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(health, timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"{argv[0]} did not start:\n{log.read().decode()[-2000:]}")
            time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_aiperf(url: str, model: str, tok: Path, args: argparse.Namespace, out: Path) -> dict:
    argv = [
        str(tool("aiperf")), "profile", "--model", model, "--url", url,
        "--endpoint-type", "chat", "--streaming", "--tokenizer", str(tok),
        "--concurrency", str(args.concurrency), "--request-count", str(args.requests),
        "--prompt-input-tokens-mean", str(args.isl), "--prompt-output-tokens-mean", str(args.osl),
        "--extra-inputs", "ignore_eos:true", "--use-server-token-count",
        "--ui", "none", "--no-gpu-telemetry", "--artifact-dir", str(out),
    ]  # fmt: skip
    # aiperf 0.13 takes a local tokenizer path for a hub repo id when HF_HUB_OFFLINE=1 is
    # set, and refuses it: leave it unset (a local directory needs no hub anyway).
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    _run(argv, env=env, cwd=out.parent)
    d = json.loads((out / "profile_export_aiperf.json").read_text())

    def stat(name: str, key: str) -> float | None:
        return (d.get(name) or {}).get(key)

    errors = sum(e.get("count", 0) for e in d.get("error_summary") or [])
    return {
        "requests": stat("request_count", "avg"),
        "errors": errors,
        "ttft_p50_ms": stat("time_to_first_token", "p50"),
        "ttft_p99_ms": stat("time_to_first_token", "p99"),
        "itl_p50_ms": stat("inter_token_latency", "p50"),
        "latency_p50_ms": stat("request_latency", "p50"),
        "latency_p99_ms": stat("request_latency", "p99"),
        "output_tokens_per_s": stat("output_token_throughput", "avg"),
    }


def run_guidellm(url: str, model: str, tok: Path, args: argparse.Namespace, out: Path) -> dict:
    report = out / "guidellm.json"
    out.mkdir(parents=True, exist_ok=True)
    argv = [
        str(tool("guidellm")), "run",
        "--backend", f"kind=openai_http,target={url},model={model},"
                     "request_format=/v1/chat/completions",
        "--profile", f"kind=concurrent,streams={args.concurrency}",
        "--constraint", f"kind=max_requests,count={args.requests}",
        "--data", f"kind=synthetic_text,prompt_tokens={args.isl},output_tokens={args.osl}",
        "--tokenizer", f"kind=hf_auto,model={tok}",
        "--output", f"kind=json,path={report}", "--disable-console",
    ]  # fmt: skip
    _run(argv, cwd=out)
    bench = json.loads(report.read_text())["benchmarks"][0]
    m = bench["metrics"]

    def stat(name: str, key: str) -> float | None:
        ok = m[name]["successful"]
        return ok["percentiles"][key] if key.startswith("p") else ok.get(key)

    totals = m["request_totals"]
    tokens = m["output_token_count"]["successful"]["total_sum"]
    return {
        "requests": totals["successful"],
        "errors": totals["errored"] + totals["incomplete"],
        "ttft_p50_ms": stat("time_to_first_token_ms", "p50"),
        "ttft_p99_ms": stat("time_to_first_token_ms", "p99"),
        "itl_p50_ms": stat("inter_token_latency_ms", "p50"),
        "latency_p50_ms": 1000 * stat("request_latency", "p50"),  # type: ignore[operator]
        "latency_p99_ms": 1000 * stat("request_latency", "p99"),  # type: ignore[operator]
        "output_tokens_per_s": tokens / bench["duration"],
    }


def _run(argv: list[str], **kw: Any) -> None:
    """Run a tool quietly; its output is shown if it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"{Path(argv[0]).name} failed (exit status {done.returncode})")


RUNNERS = {"aiperf": run_aiperf, "guidellm": run_guidellm}
ROWS = (
    ("requests", "requests served", "{:.0f}"),
    ("errors", "errors", "{:.0f}"),
    ("ttft_p50_ms", "TTFT p50 ms", "{:.1f}"),
    ("ttft_p99_ms", "TTFT p99 ms", "{:.1f}"),
    ("itl_p50_ms", "inter-token p50 ms", "{:.2f}"),
    ("latency_p50_ms", "request latency p50 ms", "{:.0f}"),
    ("latency_p99_ms", "request latency p99 ms", "{:.0f}"),
    ("output_tokens_per_s", "output tokens/s", "{:.0f}"),
)


def table(name: str, direct: dict[str, Any], gateway: dict[str, Any]) -> str:
    lines = [f"| {name} | direct | through the gateway |", "|---|---|---|"]
    for key, label, fmt in ROWS:
        cells = ["-" if r.get(key) is None else fmt.format(r[key]) for r in (direct, gateway)]
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", choices=(*TOOLS, "both"), default="both")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--isl", type=int, default=128, help="prompt tokens")
    parser.add_argument("--osl", type=int, default=64, help="output tokens")
    parser.add_argument("--backend", help="base URL (default: start saber-sim)")
    parser.add_argument("--model", default="tiny", help="served model name (default tiny)")
    parser.add_argument("--tokenizer", help="tokenizer directory (default: the tiny one)")
    parser.add_argument("--out", type=Path, help="keep the tools' reports here")
    args = parser.parse_args()
    tools = list(TOOLS) if args.tool == "both" else [args.tool]
    for name in tools:
        tool(name)
    tok = tokenizer(args.tokenizer)
    bin_dir = Path(sys.executable).parent
    with contextlib.ExitStack() as stack:
        backend = args.backend
        if backend is None:
            port = free_port()
            backend = f"http://127.0.0.1:{port}"
            sim = [
                str(bin_dir / "saber-sim"), "--port", str(port), "--served-model-name",
                args.model, "--uvicorn-log-level", "warning", "--disable-uvicorn-access-log",
            ]  # fmt: skip
            stack.enter_context(process(sim, backend + "/health"))
        gport = free_port()
        gateway = f"http://127.0.0.1:{gport}"
        env = {**os.environ, "SABER_LOG_REQUESTS": "false", "SABER_BACKEND_MODEL": args.model}
        gw = [
            str(bin_dir / "saber-gateway"), "--backend", backend, "--port", str(gport),
            "--log-level", "warning",
        ]  # fmt: skip
        stack.enter_context(process(gw, gateway + "/health", env))
        out = args.out or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        out.mkdir(parents=True, exist_ok=True)
        print(
            f"{args.requests} chat streams, {args.concurrency} at a time, {args.isl} prompt "
            f"tokens, {args.osl} output tokens; tokenizer {tok}\n"
        )
        for name in tools:
            direct = RUNNERS[name](backend, args.model, tok, args, out / f"{name}-direct")
            through = RUNNERS[name](gateway, args.model, tok, args, out / f"{name}-gateway")
            print(table(name, direct, through) + "\n")


if __name__ == "__main__":
    main()
