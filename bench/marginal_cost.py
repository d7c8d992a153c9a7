"""What one more request costs the others: as the default's rule prices it when it
arrives, and as it turns out.

    .venv/bin/python bench/marginal_cost.py --preset paper --workload W1 \\
        [--sla-scale 1] [--multiple 1] [--seeds 30] [--seed-base 99000] [--every 5] \\
        [--requests 100] [--engines-file F]

The rule admits a request when its chance of meeting its SLA clears its price: what one
more sequence is expected to cost the running requests and those still to come, in
requests on schedule (docs/admission.md, "The rule"). This checks the price. Each trace
(realistic mode, at ``--multiple`` of the rate at which vLLM alone saturates the engine)
is served in virtual time by the shipped policy with no cost weighed (the future's
weight 0, the running requests' loss off), which admits as vLLM alone would; at each
arrival to a busy engine it notes the price the shipped rule would put on the request.
Then the trace is served again without that request (every ``--every``-th one): the
others' met SLAs change by what it truly cost them. Per task it prints the mean price
and the mean true cost, with the standard error over the traces (removals within one
trace are correlated). docs/admission.md ("Where the gateway does not help") quotes it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from saber.bench._engines_file import load_engines
from saber.bench._grid import VLLM_DEFAULT_MAX_NUM_SEQS, shipped_policy, shipped_tasks
from saber.bench._runner import rescore
from saber.bench.matrix.run import fit_engine, sla_scaled
from saber.config import TaskType, load_workloads
from saber.engine import PRESETS, Engine, EnginePreset
from saber.scheduler import Decision, Policy, SchedRequest, Scheduler, SpeedFn, TTFTFn
from saber.scheduler._costs import NO_FUTURE
from saber.sim import simulate
from saber.speed import SpeedModel
from saber.workload import TraceRequest, generate_trace


@dataclass(frozen=True)
class Price:
    chance: float  # of meeting its SLA at f(L + 1), when it arrived
    running: float  # what one more sequence costs the running requests
    future: float  # and the requests arriving while it runs


class Pricing(Scheduler):
    """Serves with its own policy and notes, at each arrival to a busy engine, the
    price that ``rule`` would put on the request."""

    def __init__(
        self,
        speed: SpeedFn,
        policy: Policy,
        rule: Policy,
        *,
        tasks: Mapping[str, TaskType],
        ttft: TTFTFn | None,
        seed: int,
    ) -> None:
        super().__init__(speed, policy, tasks=tasks, ttft=ttft, seed=seed)
        self.rule = rule
        self.prices: dict[str, Price] = {}

    def offer(self, req: SchedRequest, now: float) -> list[Decision]:
        if self.load:
            serving, self.policy = self.policy, self.rule
            try:
                speed = self.predicted_speed(self.load + 1)
                running, future = self._costs_now(now, speed)
                self.prices[req.id] = Price(
                    self._chance(req, speed * (req.deadline - now)),
                    self._cost(req, speed, running, NO_FUTURE),
                    future.loss(req.tokens / speed),
                )
            finally:
                self.policy = serving
        return super().offer(req, now)


def serve(
    trace: Sequence[TraceRequest],
    preset: EnginePreset,
    tasks: Mapping[str, TaskType],
    speed: SpeedModel,
    ttft: TTFTFn | None,
    seed: int,
) -> tuple[dict[str, bool], dict[str, Price]]:
    """Each request's met SLA, and the prices noted, with no cost weighed."""
    rule = dataclasses.replace(shipped_policy(), max_concurrency=VLLM_DEFAULT_MAX_NUM_SEQS)
    weighs_none = dataclasses.replace(rule, future_weight=0.0, gain=False)
    scheduler = Pricing(speed, weighs_none, rule, tasks=tasks, ttft=ttft, seed=seed)
    engine = Engine(preset, max_num_seqs=VLLM_DEFAULT_MAX_NUM_SEQS)
    result = simulate(trace, engine, tasks=tasks, scheduler=scheduler)
    return {r.id: r.met_sla for r in rescore(result.records, tasks)}, scheduler.prices


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="paper")
    parser.add_argument("--engines-file", help="YAML list of more engines (docs/bench.md)")
    parser.add_argument("--workload", default="W1")
    parser.add_argument("--sla-scale", type=float, default=1.0)
    parser.add_argument("--multiple", type=float, default=1.0, help="of vLLM alone's capacity")
    parser.add_argument("--seeds", type=int, default=30, help="traces")
    parser.add_argument("--seed-base", type=int, default=99000)
    parser.add_argument("--every", type=int, default=5, help="remove every N-th request")
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args(argv)
    if args.seeds < 2 or args.every < 1:
        parser.error("--seeds must be at least 2 and --every at least 1")

    engines = {**PRESETS, **(load_engines(args.engines_file) if args.engines_file else {})}
    if args.preset not in engines:
        parser.error(f"unknown engine {args.preset!r}")
    preset = engines[args.preset]
    tasks, workloads = shipped_tasks(), load_workloads()
    fit = fit_engine(preset, tasks, workloads, kinds=["usl"], capacity_of=[args.workload])
    rps = fit.capacity[args.workload] * args.multiple
    scaled = sla_scaled(tasks, args.sla_scale)
    ttft = None if fit.ttft is None else fit.ttft.predict
    print(
        f"{args.preset}, {args.workload}, SLA x{args.sla_scale:g}, {args.multiple:g}x its "
        f"capacity ({rps:.2f} requests/s); {args.seeds} traces of {args.requests} requests "
        f"(seeds {args.seed_base}..{args.seed_base + args.seeds - 1}), every "
        f"{args.every}th request removed in turn\n"
    )
    rows: dict[str, list[tuple[Price, bool, int]]] = defaultdict(list)
    per_trace: dict[str, list[float]] = defaultdict(list)  # mean true cost, per trace
    for i in range(args.seeds):
        trace = generate_trace(
            workloads[args.workload],
            tasks,
            rps=rps,
            n=args.requests,
            seed=args.seed_base + i,
            mode="realistic",
        )
        met, prices = serve(trace, preset, scaled, fit.models["usl"], ttft, i)
        costs: dict[str, list[int]] = defaultdict(list)
        for x in trace[:: args.every]:
            if x.id not in prices:
                continue  # it arrived at an idle engine, which the rule never prices
            without, _ = serve(
                [t for t in trace if t.id != x.id], preset, scaled, fit.models["usl"], ttft, i
            )
            cost = sum(without.values()) - sum(met[k] for k in without)
            rows[x.task].append((prices[x.id], met[x.id], cost))
            for key in (x.task, "all"):
                costs[key].append(cost)
        for key, values in costs.items():
            per_trace[key].append(statistics.fmean(values))
    rows["all"] = [row for task in sorted(rows) for row in rows[task]]

    print(
        "| task | requests | chance at arrival | met | price: running | future | total "
        "| true cost | its standard error |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for task in [*sorted(t for t in rows if t != "all"), "all"]:
        got = rows[task]
        if not got:
            continue
        traces = per_trace[task]
        se = statistics.stdev(traces) / math.sqrt(len(traces)) if len(traces) > 1 else math.nan
        running = statistics.fmean(p.running for p, _, _ in got)
        future = statistics.fmean(p.future for p, _, _ in got)
        print(
            f"| {task} | {len(got)} | {statistics.fmean(p.chance for p, _, _ in got):.3f} "
            f"| {statistics.fmean(m for _, m, _ in got):.3f} | {running:.3f} | {future:.3f} "
            f"| {running + future:.3f} | {statistics.fmean(c for _, _, c in got):.3f} "
            f"| {se:.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
