"""What the default's holds cost and buy, against vLLM alone on the same traces.

    .venv/bin/python bench/holds.py --preset l4-qwen2.5-coder-3b --workload W1 \\
        --sla-scale 2 --multiples 1,1.25,1.5 [--seeds 6] [--seed-base 21000] \\
        [--requests 100] [--engines-file F]

Each load is a multiple of the rate at which vLLM alone saturates the engine (as the
matrix's capacity grid). The policy configs/gateway.yaml ships and vLLM alone
(max_num_seqs 256) serve the same traces in virtual time, realistic mode, with the
profile saber-profile would fit. Per load it prints both goodputs; how many requests
the default held (admitted more than 50 ms after they arrived, or never), how many of
those still met their SLA, and how many it demoted; then, per task, the requests that
only vLLM alone met (what holding cost) against those only the default met (what it
bought). docs/admission.md ("Where the gateway does not help") quotes it.
"""

from __future__ import annotations

import argparse
from collections import Counter

from saber.bench._engines_file import engines_with
from saber.bench._grid import VLLM_DEFAULT_MAX_NUM_SEQS, variant_policy
from saber.bench._runner import rescore, serve_saber, serve_static
from saber.bench.matrix.run import fit_engine, sla_scaled
from saber.config import load_tasks, load_workloads
from saber.workload import generate_trace

HELD_S = 0.05
"""A request admitted this long after it arrived, or later, was held."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="l4-qwen2.5-coder-3b")
    parser.add_argument("--engines-file", help="YAML list of more engines (docs/bench.md)")
    parser.add_argument("--workload", default="W1")
    parser.add_argument("--sla-scale", type=float, default=2.0)
    parser.add_argument("--multiples", default="1,1.25,1.5", help="of vLLM alone's capacity")
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--seed-base", type=int, default=21000)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()

    engines = engines_with(args.engines_file)
    if args.preset not in engines:
        parser.error(f"unknown engine {args.preset!r}")
    preset = engines[args.preset]
    tasks, workloads = load_tasks(), load_workloads()
    fit = fit_engine(preset, tasks, workloads, kinds=["usl"], capacity_of=[args.workload])
    capacity = fit.capacity[args.workload]
    scaled = sla_scaled(tasks, args.sla_scale)
    kind, policy = variant_policy("default", VLLM_DEFAULT_MAX_NUM_SEQS)
    ttft = None if fit.ttft is None else fit.ttft.predict
    print(
        f"{args.preset}, {args.workload}, SLA x{args.sla_scale:g}: vLLM alone saturates at "
        f"{capacity:.2f} requests/s; {args.seeds} traces of {args.requests} requests a load "
        f"(seeds {args.seed_base}..{args.seed_base + args.seeds - 1})\n"
    )
    print("| load | req/s | vLLM alone | default | gap | held | held, met | demoted |")
    print("|---|---|---|---|---|---|---|---|")
    per_task: dict[float, Counter[tuple[str, str]]] = {}
    for multiple in (float(m) for m in args.multiples.split(",")):
        rps = multiple * capacity
        met = Counter[str]()
        cost = per_task[multiple] = Counter()
        for i in range(args.seeds):
            trace = generate_trace(
                workloads[args.workload],
                tasks,
                rps=rps,
                n=args.requests,
                seed=args.seed_base + i,
                mode="realistic",
            )
            alone = serve_static(trace, preset, VLLM_DEFAULT_MAX_NUM_SEQS, tasks)
            alone_met = {r.id: r.met_sla for r in rescore(alone.records, scaled)}
            served = serve_saber(
                trace,
                preset,
                scaled,
                fit.models[kind],
                policy,
                max_num_seqs=VLLM_DEFAULT_MAX_NUM_SEQS,
                ttft=ttft,
                seed=i,
            )
            for r in rescore(served.records, scaled):
                met["alone"] += alone_met[r.id]
                met["default"] += r.met_sla
                met["all"] += 1
                if r.admitted_at is None or r.admitted_at - r.arrival > HELD_S:
                    met["held"] += 1
                    met["held, met"] += r.met_sla
                met["demoted"] += r.demoted
                if alone_met[r.id] != r.met_sla:
                    cost[(r.task, "alone" if alone_met[r.id] else "default")] += 1
        share = {k: 100.0 * met[k] / met["all"] for k in ("alone", "default")}
        print(
            f"| {multiple:g}x | {rps:.1f} | {share['alone']:.1f} | {share['default']:.1f} "
            f"| {share['default'] - share['alone']:+.1f} | {met['held']} | {met['held, met']} "
            f"| {met['demoted']} |"
        )
    print("\nRequests that only one of them served on time, over all traces of a load:\n")
    print("| load | task | only vLLM alone | only the default |")
    print("|---|---|---|---|")
    for multiple, cost in per_task.items():
        for task in sorted({t for t, _ in cost}):
            print(
                f"| {multiple:g}x | {task} | {cost[(task, 'alone')]} | {cost[(task, 'default')]} |"
            )


if __name__ == "__main__":
    main()
