"""Retry-After checked: predicted against observed time to a free slot, in virtual time.

    .venv/bin/python bench/retry_after.py [--seeds 3] [--cap 16] [--queue-cap 8]

The engine model (the paper preset) serves a realistic trace behind the scheduler:
W3, then a burst far above capacity, then W3 again, with a hard cap on concurrent
requests and on each task's queue, so that requests are turned away (queue full,
or no longer useful). At each rejection the scheduler predicts when a running
request will finish and free a slot (``Scheduler.time_to_free``), which is what the
gateway's Retry-After says; the run then shows when one really did.

For the prediction of the gateway (live progress, learned lengths) and, as a
baseline, that of the previous gateway (each running request's expected tokens at
admission, less what it made, at f(L)), it prints over all rejections: the observed
over predicted time (p10, median, p90), and the share of clients that, retrying
when told (the whole seconds of Retry-After, or the milliseconds of retry-after-ms,
which the OpenAI SDKs and the AI SDK read first; the previous gateway sent only the
former), find that a slot has freed in the meantime, and how long past it they waited.

Then the rejections for a full queue alone: such a client finds room only once a
request of its own task leaves the queue, which is what the gateway's Retry-After
says for them (the k-th slot to free, ``Scheduler.slots_until_room``): the first slot's
prediction against it, observed as the time until the task's queue had room.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass, field

from saber.bench._grid import benchmark_tasks
from saber.config import DEFAULT_PROFILE_DIR, load_workloads
from saber.engine import Engine, get_preset
from saber.gateway.admission.driver import RETRY_AFTER_QUANTILE, retry_after
from saber.scheduler import (
    Action,
    Decision,
    Outcome,
    Policy,
    SchedRequest,
    Scheduler,
    TaskLengths,
)
from saber.sim import simulate
from saber.speed import load_profile
from saber.workload import generate_phased_trace

PHASES = ((60.0, 3.0), (60.0, 25.0), (60.0, 3.0))


@dataclass
class Probe:
    at: float
    predicted: dict[str, float]  # by prediction (s)
    observed: float | None = None


@dataclass
class Probing:
    """The scheduler, with a probe at each rejection and the slot releases that end them."""

    sched: Scheduler
    quantiles: tuple[float, ...]
    probes: list[Probe] = field(default_factory=list)
    open: list[Probe] = field(default_factory=list)
    full: list[Probe] = field(default_factory=list)  # rejections for a full queue
    unroomed: dict[str, list[Probe]] = field(default_factory=dict)  # by task, until room

    @property
    def lengths(self) -> TaskLengths:
        return self.sched.lengths

    def offer(self, req: SchedRequest, now: float) -> list[Decision]:
        return self._look(self.sched.offer(req, now), now)

    def poll(self, now: float) -> list[Decision]:
        return self._look(self.sched.poll(now), now)

    def progress(self, req_id: str, tokens: int, now: float) -> None:
        self.sched.progress(req_id, tokens, now)

    def finish(
        self, req_id: str, now: float, tokens: int | None = None, prompt_tokens: int | None = None
    ) -> object:
        for probe in self.open:
            probe.observed = now - probe.at
        self.open.clear()
        return self.sched.finish(req_id, now, tokens, prompt_tokens)

    def next_wakeup(self) -> float | None:
        return self.sched.next_wakeup()

    def _look(self, decisions: list[Decision], now: float) -> list[Decision]:
        if any(d.action is Action.REJECT for d in decisions) and self.sched.load:
            predicted = {f"q={q}": self.sched.time_to_free(now, q) for q in self.quantiles}
            predicted["previous"] = previous_prediction(self.sched, now)
            probe = Probe(now, predicted)  # type: ignore[arg-type]
            self.probes.append(probe)
            self.open.append(probe)
        for d in decisions:
            task = d.request.task
            if d.outcome is Outcome.REJECTED_QUEUE_FULL and self.sched.load:
                q, k = RETRY_AFTER_QUANTILE, self.sched.slots_until_room(task)
                first, room = self.sched.time_to_free(now, q), self.sched.time_to_free(now, q, k)
                probe = Probe(now, {"first slot": first, "room": room})  # type: ignore[dict-item]
                self.full.append(probe)
                self.unroomed.setdefault(task, []).append(probe)
            elif d.action is not Action.DEMOTE:  # it left its queue: admitted or expired
                for probe in self.unroomed.pop(task, []):
                    probe.observed = now - probe.at
        return decisions


def previous_prediction(sched: Scheduler, now: float) -> float:
    """The previous gateway's Retry-After before rounding: the soonest, over running
    requests, of (expected tokens at admission - tokens made) at f(L), at least one token."""
    speed = sched.predicted_speed(sched.load)
    made = {
        r.id: r.generated if r.generated is not None else sched._made(r, now)
        for r in sched.running()
    }
    return min(max(r.tokens - made[r.id], 1.0) for r in sched.running()) / speed


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def report(name: str, predicted: list[float], observed: list[float], previous: bool) -> str:
    ratios = [o / max(p, 1e-3) for p, o in zip(predicted, observed, strict=True)]
    if previous:  # whole seconds within 1..120, and no retry-after-ms: clients use those
        whole = [float(min(max(math.ceil(p), 1), 120)) for p in predicted]
        precise = whole
    else:
        given = [retry_after(p) for p in predicted]
        whole = [float(seconds) for seconds, _ in given]
        precise = [ms / 1000 for _, ms in given]
    found_whole = statistics.fmean(o <= w for o, w in zip(observed, whole, strict=True))
    found_ms = statistics.fmean(o <= w for o, w in zip(observed, precise, strict=True))
    waited = statistics.median(max(w - o, 0.0) for o, w in zip(observed, precise, strict=True))
    return (
        f"| {name} | {quantile(ratios, 0.1):.2f} / {statistics.median(ratios):.2f} / "
        f"{quantile(ratios, 0.9):.2f} | {statistics.median(predicted):.2f} | "
        f"{statistics.median(observed):.2f} | {100 * found_whole:.0f}% | {100 * found_ms:.0f}% "
        f"| {waited:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cap", type=int, default=16, help="max_concurrency")
    parser.add_argument("--queue-cap", type=int, default=8, help="queue_cap, per task")
    parser.add_argument(
        "--quantiles",
        default=str(RETRY_AFTER_QUANTILE),
        help="comma-separated chances that a slot has freed by the time predicted "
        f"(default: the gateway's, {RETRY_AFTER_QUANTILE})",
    )
    args = parser.parse_args()
    tasks = benchmark_tasks()
    workload = load_workloads()["W3"]
    speed = load_profile(DEFAULT_PROFILE_DIR / "saber-sim-paper.json").speed_model()
    probes: list[Probe] = []
    full: list[Probe] = []
    policy = Policy.named("closed-loop", max_concurrency=args.cap, queue_cap=args.queue_cap)
    quantiles = tuple(float(q) for q in args.quantiles.split(","))
    for seed in range(args.seeds):
        trace = generate_phased_trace(workload, tasks, phases=PHASES, seed=seed)
        probing = Probing(Scheduler(speed, policy, tasks=tasks, seed=seed), quantiles)
        engine = Engine(get_preset("paper"), max_num_seqs=256)
        simulate(trace, engine, tasks=tasks, scheduler=probing)
        probes += [p for p in probing.probes if p.observed is not None]
        full += [p for p in probing.full if p.observed is not None]
    observed = [p.observed for p in probes if p.observed is not None]
    print(
        f"{len(probes)} rejections over {args.seeds} runs (W3, phases {PHASES} as (s, RPS); "
        f"max_concurrency {args.cap}, queue_cap {args.queue_cap})\n"
    )
    print(
        "| prediction | observed / predicted p10 / p50 / p90 | predicted p50 s | "
        "observed p50 s | slot free at Retry-After | at retry-after-ms | "
        "waited past it p50 s |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in probes[0].predicted:
        label = (
            "previous (expected tokens at admission)"
            if name == "previous"
            else f"gateway, {name} (live progress, learned lengths)"
        )
        print(report(label, [p.predicted[name] for p in probes], observed, name == "previous"))
    assert all(math.isfinite(v) for p in probes for v in p.predicted.values())
    if not full:
        return
    print(f"\n{len(full)} of them for a full queue: the time until its task's queue had room\n")
    print(
        "| prediction | observed / predicted p10 / p50 / p90 | predicted p50 s | "
        "observed p50 s | room at Retry-After | at retry-after-ms | waited past it p50 s |"
    )
    print("|---|---|---|---|---|---|---|")
    room_observed = [p.observed for p in full if p.observed is not None]
    for name, label in (
        ("first slot", "the first slot to free (before)"),
        ("room", "gateway: as many slots as wait ahead"),
    ):
        print(report(label, [p.predicted[name] for p in full], room_observed, False))


if __name__ == "__main__":
    main()
