"""How closely does saber-sim, over HTTP, decode at the speed the engine model predicts?

For each concurrency level, N identical streaming requests (``ignore_eos``,
fixed ``max_tokens``) go to a saber-sim server at once; each request's decode
speed, (tokens - 1) / (last token - first token), is taken from the arrival times
of its SSE frames and divided by the time scale. The prediction runs the same
requests through the engine model in virtual time. Prints one row per level.

    .venv/bin/python bench/sim_fidelity.py                     # --time-scale 1
    .venv/bin/python bench/sim_fidelity.py --time-scale 2
    .venv/bin/python bench/sim_fidelity.py --url http://127.0.0.1:8000  # a running server

With no ``--url`` the script starts ``python -m saber.sim.http`` in a separate
process (so that the measuring client does not share its interpreter).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from saber.sim.http import SimSettings
from saber.sim.http.fidelity import compare, measure, predict


@contextmanager
def sim_process(settings: SimSettings) -> Iterator[str]:
    cmd = [
        sys.executable, "-m", "saber.sim.http", "--port", "0", "--disable-uvicorn-access-log",
        "--preset", settings.preset, "--time-scale", str(settings.time_scale),
        "--max-num-seqs", str(settings.max_num_seqs),
        "--max-num-batched-tokens", str(settings.max_num_batched_tokens),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if m := re.search(r"running on (http://\S+)", line):
                # Keep draining its log so that a full pipe never blocks it.
                threading.Thread(target=proc.stderr.read, daemon=True).start()
                yield m.group(1)
                return
        raise RuntimeError("saber-sim did not start")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--preset", default="paper")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--output-tokens", type=int, default=200)
    p.add_argument("--url", help="measure this running server instead of starting one")
    args = p.parse_args()
    settings = SimSettings(
        preset=args.preset,
        time_scale=args.time_scale,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
    )

    def run(url: str) -> None:
        print(f"preset {settings.preset}, time scale {settings.time_scale:g}, "
              f"{args.prompt_tokens} prompt + {args.output_tokens} output tokens")  # fmt: skip
        print(f"{'concurrency':>11}  {'predicted tok/s':>15}  {'measured tok/s':>14}  {'error':>7}")
        for c in args.concurrency:
            predicted = predict(
                settings, c, prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens
            )
            measured = asyncio.run(
                measure(
                    url,
                    settings.model_name,
                    c,
                    prompt_tokens=args.prompt_tokens,
                    output_tokens=args.output_tokens,
                    time_scale=settings.time_scale,
                )
            )
            r = compare(predicted, measured, c)
            print(f"{c:>11}  {r.predicted:>15.2f}  {r.measured:>14.2f}  {r.error:>+7.1%}")

    if args.url:
        run(args.url)
    else:
        with sim_process(settings) as url:
            run(url)


if __name__ == "__main__":
    main()
