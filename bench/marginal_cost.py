"""What one more request costs the others, as the default's rule prices it when it
arrives and as it turns out; and what each of its holds buys.

    .venv/bin/python bench/marginal_cost.py --preset paper --workload W1 \\
        [--sla-scale 1] [--multiple 1] [--seeds 30] [--seed-base 99000] [--every 5] \\
        [--requests 100] [--engines-file F]

The rule admits a request when its chance of meeting its SLA clears its price: what one
more sequence is expected to cost the running requests and those still to come, in
requests on schedule (docs/admission.md, "The rule"). Traces are served in virtual time
(realistic mode, at ``--multiple`` of the rate at which vLLM alone saturates the
engine), two ways.

The price: the shipped policy with no cost weighed (the future's weight 0, the running
requests' loss off) admits as vLLM alone would, and at each arrival to a busy engine
notes the price the shipped rule would put on the request. Then the trace is served
again without that request (every ``--every``-th one): the others' met SLAs change by
what it truly cost them.

The holds: the shipped policy serves the trace; each request it does not admit on
arrival is, in another run, admitted on arrival instead, everything else left to the
rule. Its own met SLA and the others' change by what the hold cost it and bought them.

Per task it prints the means; the true cost and what the holds bought are means over
the traces of each trace's mean, with their standard error (the requests of one trace
are correlated). docs/admission.md ("Is the price right?") quotes it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from saber.bench._engines_file import engines_with
from saber.bench._grid import VLLM_DEFAULT_MAX_NUM_SEQS, shipped_policy, shipped_tasks
from saber.bench._runner import rescore
from saber.bench.matrix.run import fit_engine, sla_scaled
from saber.config import TaskType, load_workloads
from saber.engine import Engine, EnginePreset
from saber.scheduler import Decision, Policy, SchedRequest, Scheduler, SpeedFn, Tier, TTFTFn
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
    """Serves with its own policy; notes, at each arrival to a busy engine, the price
    that ``rule`` would put on the request, and which requests were left waiting on
    arrival; admits the one named ``admit`` on arrival whatever the policy says."""

    def __init__(
        self,
        speed: SpeedFn,
        policy: Policy,
        rule: Policy,
        *,
        tasks: Mapping[str, TaskType],
        ttft: TTFTFn | None,
        seed: int,
        admit: str | None = None,
    ) -> None:
        super().__init__(speed, policy, tasks=tasks, ttft=ttft, seed=seed)
        self.rule, self.admit = rule, admit
        self.prices: dict[str, Price] = {}
        self.held: set[str] = set()

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
        out = super().offer(req, now)
        if req.id in self._hpq:  # it waits
            self.held.add(req.id)
            if req.id == self.admit:
                self._hpq.remove(req.id)
                out.append(self._start(req, now, Tier.HIGH))
        return out


@dataclass(frozen=True)
class Served:
    met: dict[str, bool]
    waited: dict[str, float]  # from arrival to admission (inf: never admitted)
    demoted: set[str]
    prices: dict[str, Price]
    held: set[str]


@dataclass(frozen=True)
class Setup:
    preset: EnginePreset
    tasks: Mapping[str, TaskType]
    speed: SpeedModel
    ttft: TTFTFn | None

    def serve(
        self, trace: Sequence[TraceRequest], seed: int, *, weigh: bool, admit: str | None = None
    ) -> Served:
        """The trace served by the shipped policy (``weigh``) or by it with no cost
        weighed, ``admit`` admitted on arrival."""
        rule = dataclasses.replace(shipped_policy(), max_concurrency=VLLM_DEFAULT_MAX_NUM_SEQS)
        policy = rule if weigh else dataclasses.replace(rule, future_weight=0.0, gain=False)
        scheduler = Pricing(
            self.speed, policy, rule, tasks=self.tasks, ttft=self.ttft, seed=seed, admit=admit
        )
        engine = Engine(self.preset, max_num_seqs=VLLM_DEFAULT_MAX_NUM_SEQS)
        result = simulate(trace, engine, tasks=self.tasks, scheduler=scheduler)
        records = rescore(result.records, self.tasks)
        return Served(
            {r.id: r.met_sla for r in records},
            {
                r.id: math.inf if r.admitted_at is None else r.admitted_at - r.arrival
                for r in records
            },
            {r.id for r in records if r.demoted},
            scheduler.prices,
            scheduler.held,
        )


def others_gain(base: Served, other: Served, x: str) -> int:
    """Met SLAs of the requests other than ``x``, in ``other`` less in ``base``."""
    return sum(met for k, met in other.met.items() if k != x) - sum(
        met for k, met in base.met.items() if k != x
    )


def _mean_se(per_trace: list[float]) -> str:
    if len(per_trace) < 2:
        return "n/a"
    se = statistics.stdev(per_trace) / math.sqrt(len(per_trace))
    return f"{statistics.fmean(per_trace):+.3f} ± {se:.3f}"


def _print_table(title: str, header: str, rows: list[list[str]]) -> None:
    """A markdown table under ``title``; ``header``'s columns split on ``|``."""
    columns = header.count("|") + 1
    print(f"{title}\n\n| {header} |\n|{'---|' * columns}")
    for row in rows:
        print("| " + " | ".join(row) + " |")


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

    engines = engines_with(args.engines_file)
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
        f"one request in {args.every} removed in turn\n"
    )
    setup = Setup(preset, scaled, fit.models["usl"], ttft)
    removed: dict[str, list[tuple[Price, bool, int]]] = defaultdict(list)
    held: dict[str, list[tuple[Price | None, bool, int, int]]] = defaultdict(list)
    cost_by_trace: dict[str, list[float]] = defaultdict(list)
    bought_by_trace: dict[str, list[float]] = defaultdict(list)
    for i in range(args.seeds):
        trace = generate_trace(
            workloads[args.workload],
            tasks,
            rps=rps,
            n=args.requests,
            seed=args.seed_base + i,
            mode="realistic",
        )
        costs: dict[str, list[int]] = defaultdict(list)
        base = setup.serve(trace, i, weigh=False)
        for x in trace[:: args.every]:
            if x.id not in base.prices:
                continue  # it arrived at an idle engine, which the rule never prices
            without = setup.serve([t for t in trace if t.id != x.id], i, weigh=False)
            cost = others_gain(base, without, x.id)  # what it cost them
            removed[x.task].append((base.prices[x.id], base.met[x.id], cost))
            costs[x.task].append(cost)
            costs["all"].append(cost)
        bought: dict[str, list[int]] = defaultdict(list)
        shipped = setup.serve(trace, i, weigh=True)
        for x in (t for t in trace if t.id in shipped.held):
            admitted = setup.serve(trace, i, weigh=True, admit=x.id)
            own = admitted.met[x.id] - shipped.met[x.id]
            others = -others_gain(shipped, admitted, x.id)  # what the hold bought them
            held[x.task].append((shipped.prices.get(x.id), x.id in shipped.demoted, own, others))
            bought[x.task].append(others)
            bought["all"].append(others)
        for key, values in costs.items():
            cost_by_trace[key].append(statistics.fmean(values))
        for key, values in bought.items():
            bought_by_trace[key].append(statistics.fmean(values))
    removed["all"] = [row for task in sorted(removed) for row in removed[task]]
    held["all"] = [row for task in sorted(held) for row in held[task]]

    removed_rows = []
    for task in [*sorted(t for t in removed if t != "all"), "all"]:
        if rows := removed[task]:
            running = statistics.fmean(p.running for p, _, _ in rows)
            future = statistics.fmean(p.future for p, _, _ in rows)
            removed_rows.append(
                [
                    task,
                    str(len(rows)),
                    f"{statistics.fmean(p.chance for p, _, _ in rows):.3f}",
                    f"{statistics.fmean(m for _, m, _ in rows):.3f}",
                    f"{running:.3f}",
                    f"{future:.3f}",
                    f"{running + future:.3f}",
                    _mean_se(cost_by_trace[task]),
                ]
            )
    _print_table(
        "What one more request costs the others, served with no cost weighed:",
        "task | requests | chance at arrival | met | price: running | future | total | true cost",
        removed_rows,
    )
    held_rows = []
    for task in [*sorted(t for t in held if t != "all"), "all"]:
        if rows_held := held[task]:
            priced = [p for p, _, _, _ in rows_held if p is not None]
            chance = statistics.fmean(p.chance for p in priced) if priced else math.nan
            price = statistics.fmean(p.running + p.future for p in priced) if priced else math.nan
            held_rows.append(
                [
                    task,
                    str(len(rows_held)),
                    f"{chance:.3f}",
                    f"{price:.3f}",
                    f"{statistics.fmean(d for _, d, _, _ in rows_held):.2f}",
                    f"{statistics.fmean(o for _, _, o, _ in rows_held):+.3f}",
                    _mean_se(bought_by_trace[task]),
                ]
            )
    print()
    _print_table(
        "What each hold of the shipped policy cost the held request and bought the others:",
        "task | holds | chance at arrival | price | demoted | admitted on arrival instead: "
        "its own met | the others' met lost",
        held_rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
