"""Does forwarding the admission tier as vLLM's priority pay? (backend.forward_priority)

    .venv/bin/python bench/engine_priority.py [--presets paper,a10-qwen2.5-coder-7b]
        [--workloads W1,W3] [--loads 0.5,1,1.5,2,2.5] [--seeds 3] [--seed-base 52000]

Virtual time, realistic mode: the shipped policy (configs/gateway.yaml) in front of
the engine model, on the profile saber-profile would fit on each engine, each trace
served twice: by an engine under vLLM's default fcfs and by one under
``--scheduling-policy priority`` with the gateway's tier forwarded (demoted work is
priority 1). Loads are multiples of the rate at which vLLM alone saturates that
engine. Prints, per engine and workload, the goodput of each and the engine's
preemptions, and the pooled difference: priority minus fcfs.
"""

from __future__ import annotations

import argparse
import statistics

from rich.progress import track

from saber.bench._args import csv
from saber.bench._offline import engine_profile, saturation_rate
from saber.config import load_gateway_config, load_workloads
from saber.engine import Engine, SchedulingPolicy, get_preset
from saber.scheduler import Policy, Scheduler
from saber.sim import simulate
from saber.workload import generate_trace

POLICIES: tuple[SchedulingPolicy, ...] = ("fcfs", "priority")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--presets", type=csv(str), default=["paper", "a10-qwen2.5-coder-7b", "l4-qwen2.5-coder-3b"]
    )
    parser.add_argument("--workloads", type=csv(str), default=["W1", "W3"])
    parser.add_argument("--loads", type=csv(float), default=[0.5, 1.0, 1.5, 2.0, 2.5])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed-base", type=int, default=52000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=256,
        help="the engine's seats (below the gateway's max_concurrency, vLLM's own queue fills)",
    )
    args = parser.parse_args()

    config = load_gateway_config(env={})
    tasks, policy = config.tasks, Policy.from_config(config)
    workloads = load_workloads()
    rows = [
        "| engine | workload | goodput fcfs | goodput priority | priority - fcfs "
        "| preemptions fcfs | preemptions priority |",
        "|---|---|---|---|---|---|---|",
    ]
    diffs: list[float] = []
    for name in args.presets:
        preset = get_preset(name)
        for wl in args.workloads:
            workload = workloads[wl]
            speed, ttft = engine_profile(preset, workload, tasks)
            capacity = saturation_rate(preset, workload, tasks)
            good: dict[str, list[float]] = {p: [] for p in POLICIES}
            preempt = dict.fromkeys(POLICIES, 0)
            points = [(x, s) for x in args.loads for s in range(args.seeds)]
            for load, seed in track(points, description=f"{name} {wl}", transient=True):
                trace = generate_trace(
                    workload,
                    tasks,
                    rps=load * capacity,
                    n=args.requests,
                    seed=args.seed_base + seed,
                    mode="realistic",
                )
                for sched_policy in POLICIES:
                    engine = Engine(
                        preset, max_num_seqs=args.max_num_seqs, scheduling_policy=sched_policy
                    )
                    scheduler = Scheduler(speed, policy, tasks=tasks, ttft=ttft, seed=seed)
                    result = simulate(trace, engine, tasks=tasks, scheduler=scheduler)
                    good[sched_policy].append(100 * result.goodput())
                    preempt[sched_policy] += engine.total_preemptions
            fcfs, prio = statistics.fmean(good["fcfs"]), statistics.fmean(good["priority"])
            diffs += [b - a for a, b in zip(good["fcfs"], good["priority"], strict=True)]
            rows.append(
                f"| {name} | {wl} | {fcfs:.1f} | {prio:.1f} | {prio - fcfs:+.2f} "
                f"| {preempt['fcfs']} | {preempt['priority']} |"
            )
    print(
        f"engine max_num_seqs {args.max_num_seqs}; the gateway's max_concurrency "
        f"{config.max_concurrency}"
    )
    print("\n".join(rows))
    print(
        f"\npooled over {len(diffs)} traces: priority - fcfs mean {statistics.fmean(diffs):+.2f}, "
        f"min {min(diffs):+.1f}, max {max(diffs):+.1f} goodput points"
    )


if __name__ == "__main__":
    main()
