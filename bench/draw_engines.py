"""Draw engines at random for a held-out check of the default: engines no one tuned for.

    .venv/bin/python bench/draw_engines.py --seed 4444 --count 8 --prefix r44 \\
        > bench/random_engines_4444.yaml
    .venv/bin/saber-bench matrix --engines-file bench/random_engines_4444.yaml \\
        --presets r44-0,r44-1,r44-2,r44-3,r44-4,r44-5,r44-6,r44-7 --sla-scales 0.6,1.4 \\
        --seeds 3 --seed-base 63000 --variants ''

Each engine is one of the shipped models on an accelerator and serving stack drawn
uniformly from the ranges of docs/admission.md ("Where the gateway does not help"):
memory 24-96 GB, bandwidth 300-3,500 GB/s, 80-900 TFLOPS, ``memory_efficiency``
0.6-0.9, ``mfu`` 0.3-0.6, a step overhead of 2-6 ms. The output is an engines file
(``saber.bench._engines_file``). Draw with a seed no earlier check used, and choose the
SLA scales and trace seeds after the draw: a check is only held out once.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import yaml

MODELS = ("qwen2.5-coder-1.5b", "qwen2.5-coder-3b", "qwen2.5-coder-7b")
MEMORY_GB = (24.0, 32.0, 40.0, 48.0, 64.0, 80.0, 96.0)  # sizes accelerators are sold in
BANDWIDTH_GBS = (300.0, 3500.0)
TFLOPS = (80.0, 900.0)
MEMORY_EFFICIENCY = (0.6, 0.9)
MFU = (0.3, 0.6)
STEP_OVERHEAD_S = (0.002, 0.006)


def draw(seed: int, count: int, prefix: str) -> list[dict[str, object]]:
    """``count`` engines named ``<prefix>-0`` .. from numpy's generator seeded ``seed``."""
    rng = np.random.default_rng(seed)
    engines: list[dict[str, object]] = []
    for i in range(count):
        engines.append(
            {
                "name": f"{prefix}-{i}",
                "hardware": {
                    "memory_gb": float(rng.choice(MEMORY_GB)),
                    "bandwidth_gbs": float(round(rng.uniform(*BANDWIDTH_GBS))),
                    "tflops": float(round(rng.uniform(*TFLOPS))),
                },
                "model": str(rng.choice(MODELS)),
                "memory_efficiency": round(float(rng.uniform(*MEMORY_EFFICIENCY)), 2),
                "mfu": round(float(rng.uniform(*MFU)), 2),
                "step_overhead_s": round(float(rng.uniform(*STEP_OVERHEAD_S)), 4),
            }
        )
    return engines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, required=True, help="numpy generator seed")
    parser.add_argument("--count", type=int, default=8, help="engines to draw (default 8)")
    parser.add_argument("--prefix", default="r", help="names are PREFIX-0, PREFIX-1, ...")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    engines = draw(args.seed, args.count, args.prefix)
    print(
        f"# {args.count} engines drawn at random (bench/draw_engines.py --seed {args.seed}"
        f" --count {args.count} --prefix {args.prefix}); names: "
        + ",".join(str(e["name"]) for e in engines)
    )
    yaml.safe_dump(engines, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
