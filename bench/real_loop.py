"""The real loop on llama.cpp: does the gateway, with a profile just fitted, keep fewer
requests in flight at the engine and meet more short-SLA requests than the same stream
sent straight to the engine?

Starts llama-server (the tiny GGUF model, from the cache), profiles it
(``saber.profile.profile_backend``, what saber-profile runs), rescales the paper's SLAs
to its speed, starts saber-gateway with the profile, and replays one seeded Poisson
stream at ``--overload`` times the measured capacity, once each way
(``saber.bench.run_real``, what ``saber-bench real`` runs). Prints the profile and both
runs' figures. The engines and the loop are the test harness's (``tests/harness``,
not part of the installed package): this script puts ``tests/`` on the import path.

    .venv/bin/python bench/real_loop.py
    .venv/bin/python bench/real_loop.py --overload 2 --requests 160 --seed 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import get_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness import real_loop, start_llamacpp
from saber.config import GatewayConfig


def settings(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {"policy": args.policy}
    if args.refit_points:
        n = args.refit_points
        out["refit"] = {"interval_s": 1.0, "window": n, "min_points": n, "every": max(n // 3, 1)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="llama-server's threads (default 1)")
    parser.add_argument("--overload", type=float, default=4.0, help="rate / capacity")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workload", default="W3")
    parser.add_argument("--input-scale", type=float, default=0.1, help="prompt lengths x")
    parser.add_argument("--output-scale", type=float, default=0.5, help="output lengths x")
    parser.add_argument("--out", type=Path, help="folder to keep the profile, configs and runs")
    parser.add_argument("--profile", type=Path, help="reuse this profile (same engine, scales)")
    policies = get_args(GatewayConfig.model_fields["policy"].annotation)
    parser.add_argument("--policy", choices=policies, default="closed-loop")
    parser.add_argument(
        "--refit-points",
        type=int,
        default=None,
        help="refit f(L) on this many finished requests, every third of them "
        "(default: the gateway's, 200 every 200, which a short run never reaches)",
    )
    args = parser.parse_args()
    workdir = args.out or Path(tempfile.mkdtemp(prefix="saber-real-loop-"))
    workdir.mkdir(parents=True, exist_ok=True)
    # 2,048 positions per slot: room for the longest request of the mix.
    engine = start_llamacpp(parallel=32, ctx=65536, threads=args.threads)
    try:
        report = real_loop(
            engine,
            workdir,
            workload=args.workload,
            input_scale=args.input_scale,
            output_scale=args.output_scale,
            overload=args.overload,
            requests=args.requests,
            seed=args.seed,
            profile=args.profile,
            settings=settings(args),
        )
    finally:
        engine.stop()
    prof = report.profile
    print(f"profile: {prof.kind} {prof.params} R^2={prof.r2:.4f}; files in {workdir}")
    slas = ", ".join(f"{n} {t.sla_s:.3f} s" for n, t in report.tasks.items())
    print(f"SLAs: {slas}")
    print(f"capacity {report.capacity_rps:.2f} req/s; sent {report.rps:.2f} req/s")
    learned = report.status["learning"]
    print(
        f"gateway learned: {learned['refits']} refits, {learned['swaps']} swaps, "
        f"observed/profile {learned['observed_over_profile']}, observed/predicted "
        f"{learned['observed_over_predicted']}, calibration {report.status['calibration']}"
    )
    tasks = report.status["tasks"]
    print(
        "expected lengths (configured -> learned mean, p90): "
        + ", ".join(
            f"{n} {t['configured_output_tokens']:.0f} -> {t['learned_output_tokens']['mean']:.0f}, "
            f"{t['learned_output_tokens']['p90']:.0f}"
            for n, t in tasks.items()
            if t["learned_output_tokens"]
        )
    )
    for run in ("direct", "gateway"):
        s = report.summary(run)
        print(
            f"{run:8s} engine in flight mean {s['engine_in_flight_mean']:.1f} "
            f"max {s['engine_in_flight_max']:.0f}; goodput {s['goodput']:.1%}; "
            f"short-SLA goodput {s['short_sla_goodput']:.1%}; errors {s['errors']}; "
            f"{s['duration_s']:.1f} s"
        )


if __name__ == "__main__":
    main()
