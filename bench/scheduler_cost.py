"""What an admission round costs: the scheduler's time per poll, live progress on.

    .venv/bin/python bench/scheduler_cost.py [--rounds 3000] [--running 16,256,1024,4096]
        [--waiting 10,1000,10000]

16, 256, 1,024 or 4,096 requests run (no cap stops admission, so every round tries to
admit), and 10, 1,000 or 10,000 wait in the HPQs of four task types, each needing more
than f(L + 1)
so that nothing passes and every round scans its whole window: the worst case of a
full engine with a long queue. Each round also reports the generated-token count
of 8 running requests (``progress``, as the relay does per frame), and every 10
rounds one running request finishes (``finish`` teaches the learned lengths and the
calibration) and one more arrives (``offer``), so learning runs throughout.

Prints, per queue size, p50 / p99 / max of one ``poll`` in microseconds for the
default policy (closed-loop), the previous default (mean) and the paper's rule,
measured in the same run: the paper's is the baseline the ratio is taken against. Each
figure is the median of ``--repeat`` runs.
Then a poll half a round later with nothing reported between ("unchanged": a pool
polls every backend at each event, and the scheduler's timer polls when nothing
happened), and the events: a finish (``finish``) and an arrival (``offer``, whose own
``poll`` searches the changed queue afresh and prices the running requests). Last, the
default's finish and arrival at each running count over its own at the fewest.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from saber.bench._grid import benchmark_tasks
from saber.scheduler import Policy, SchedRequest, Scheduler
from saber.speed import MODELS

RUNNING = (16, 256, 1_024, 4_096)
SIZES = (10, 1_000, 10_000)
USL = MODELS["usl"].from_params(lam=130.0, sigma=0.0477, kappa=0.000154)


SPACING_S = 0.05
"""The running requests arrived this far apart, one after the other (a burst all at once
would have the default hold the last of them for the arrivals still to come). Past 2,481
running, where this curve gives each 0.12 tokens/s, it holds some even so: each is then
admitted when the scheduler next wakes (``build``)."""


class TokenClock:
    """Tokens one request has made since the start at f(L) of the load that held: each
    running request reports what it made since its admission by this clock, as the
    engine the speed model describes would stream them (a request admitted while few
    ran made its first tokens fast), so the calibration stays at 1 and a finish times
    the scheduler's bookkeeping, not a refit of the calibration."""

    def __init__(self) -> None:
        self.tokens, self.at = 0.0, 0.0

    def advance(self, now: float, load: int) -> float:
        self.tokens += USL(load) * (now - self.at) if load else 0.0
        self.at = now
        return self.tokens


def build(
    policy: Policy, running: int, waiting: int
) -> tuple[Scheduler, float, dict[str, float], TokenClock]:
    """``running`` requests admitted one after the other, then ``waiting`` that can never
    be admitted; returns the scheduler, the time the last of them arrived, the token
    clock at each running request's admission, and the clock."""
    tasks = benchmark_tasks()
    sched = Scheduler(USL, policy, tasks=tasks, seed=0)
    names = sorted(t for t in tasks if t != "code_completion")  # useful for a minute or more
    at = 0.0
    started: dict[str, float] = {}  # the token clock at each one's admission
    clock = TokenClock()
    for i in range(running):  # each needs 10 tokens in 10,000 s: admitted on arrival
        sched.offer(SchedRequest(f"run{i}", names[i % len(names)], at, at + 1e4, 10, cap=1000), at)
        while sched.load <= i:  # held for the arrivals to come: admitted at a wake-up
            wake = sched.next_wakeup()
            assert wake is not None and wake < 1e4, f"run{i} would never be admitted"
            clock.advance(max(at, wake), sched.load)
            at = max(at, wake)
            sched.poll(at)
        started[f"run{i}"] = clock.advance(at, i)
        at += SPACING_S
        clock.advance(at, sched.load)
    assert sched.load == running
    start = at
    f_next = sched.predicted_speed(running + 1)
    # Each waiting request needs more than f(L + 1) (twice it, or nearly f(1) where that
    # is less, so that none is demoted in the run): it stays in the HPQ, never admitted.
    pace = min(2.0 * f_next, 0.95 * sched.max_speed)
    # Of the tasks wanted for two minutes or more, so that none expires in the run.
    patient = [n for n in names if (tasks[n].useful_s or 1e9) >= 120]
    need = int(100 * pace)
    for i in range(waiting):
        # Exact: its length is known (a client's ignore_eos), so the default policy's
        # chance of finishing in time is no guess.
        req = SchedRequest(
            f"w{i:06d}", patient[i % len(patient)], start, start + 100.0, need,
            cap=max(need, 4096), exact=True,
        )  # fmt: skip
        sched.offer(req, start)
    assert sched.queued() == waiting and sched.load == running
    return sched, start, started, clock


EVENT_EVERY = 10
"""Rounds between a finish and an arrival."""
PARTS = ("poll", "unchanged", "finish", "arrival")
"""What ``measure`` times, in the order the table prints them."""
TICK_S = 0.005
"""Seconds between rounds: 3,000 rounds take 15 s, before the waiting requests come due
for demotion at 16 running (about 25 s in, where they need nearly f(1))."""


def measure(
    policy: Policy, running_count: int, waiting: int, rounds: int
) -> dict[str, list[float]]:
    """Microseconds per ``poll``, per unchanged poll, per finish and per arrival."""
    sched, now, started, clock = build(policy, running_count, waiting)
    times: list[float] = []
    unchanged: list[float] = []
    finishes: list[float] = []
    arrivals_us: list[float] = []
    tick = TICK_S
    running = [f"run{i}" for i in range(running_count)]
    gc.collect()
    gc.disable()
    try:
        for k in range(rounds):
            now += tick
            made = clock.advance(now, sched.load)
            for j in range(8):  # a few frames arrived since the last round
                rid = running[(k * 8 + j) % len(running)]
                sched.progress(rid, int(made - started[rid]), now)
            # A finish and an arrival every EVENT_EVERY rounds, while half the running
            # remain (the paper's window may leave the arrival behind the front of the
            # queue).
            if k % EVENT_EVERY == EVENT_EVERY - 1 and len(running) > running_count // 2:
                done = running.pop(0)
                new = f"run-new{k}"
                start = time.perf_counter_ns()
                sched.finish(done, now, max(int(made - started.pop(done)), 1))
                mid = time.perf_counter_ns()
                sched.offer(SchedRequest(new, "code_qna", now, now + 1e4, 10, cap=256), now)
                end = time.perf_counter_ns()
                finishes.append((mid - start) / 1000)
                arrivals_us.append((end - mid) / 1000)
                if sched.is_running(new):
                    running.append(new)
                    started[new] = made
            start = time.perf_counter_ns()
            sched.poll(now)
            times.append((time.perf_counter_ns() - start) / 1000)
            start = time.perf_counter_ns()
            sched.poll(now + tick / 2)
            unchanged.append((time.perf_counter_ns() - start) / 1000)
    finally:
        gc.enable()
    return dict(zip(PARTS, (times, unchanged, finishes, arrivals_us), strict=True))


def summarize(parts: dict[str, list[float]]) -> dict[str, float]:
    """p50 and p99 of each part (``poll p50``, ``poll p99``, ...), and the poll's max."""
    out = {}
    for part in PARTS:
        xs = sorted(parts[part])
        out[f"{part} p50"], out[f"{part} p99"] = statistics.median(xs), pct(xs, 0.99)
    out["poll max"] = max(parts["poll"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--running", default=",".join(map(str, RUNNING)))
    parser.add_argument("--waiting", default=",".join(map(str, SIZES)))
    parser.add_argument(
        "--repeat", type=int, default=3,
        help="runs of each cell, one policy after the other; each figure is the median "
        "of its runs' (this machine's timings move by a third from run to run)",
    )  # fmt: skip
    args = parser.parse_args()
    policies = {name: Policy.named(name) for name in ("closed-loop", "mean", "paper")}
    print(f"one poll per round, {args.rounds} rounds, median of {args.repeat} runs; microseconds")
    print(
        "| running | waiting | policy | poll p50 | p99 | max | p99 / paper's "
        "| unchanged p50 | p99 | finish p50 | p99 | arrival p50 | p99 | p99 / paper's |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    cells = [(int(r), int(w)) for r in args.running.split(",") for w in args.waiting.split(",")]
    default: dict[tuple[int, int], dict[str, float]] = {}
    for running, waiting in cells:
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in policies}
        for _ in range(args.repeat):
            for name, policy in policies.items():
                runs[name].append(summarize(measure(policy, running, waiting, args.rounds)))
        med = {
            name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            for name, rs in runs.items()
        }
        default[running, waiting] = med["closed-loop"]
        base = med["paper"]
        for name, m in med.items():
            label = "default (closed-loop)" if name == "closed-loop" else name
            print(
                f"| {running:,} | {waiting:,} | {label} | {m['poll p50']:.1f} "
                f"| {m['poll p99']:.1f} | {m['poll max']:.0f} "
                f"| {m['poll p99'] / base['poll p99']:.2f} "
                f"| {m['unchanged p50']:.1f} | {m['unchanged p99']:.1f} "
                f"| {m['finish p50']:.0f} | {m['finish p99']:.0f} "
                f"| {m['arrival p50']:.0f} | {m['arrival p99']:.0f} "
                f"| {m['arrival p99'] / base['arrival p99']:.2f} |"
            )
    growth(default)


def growth(default: dict[tuple[int, int], dict[str, float]]) -> None:
    """The default's finish and arrival at each running count over its own at the fewest
    running, for the same queue: whether an event costs more as more runs."""
    counts = sorted({r for r, _ in default})
    if len(counts) < 2:
        return
    print(f"\ndefault, each event over its cost at {counts[0]:,} running (same queue):")
    print("| running | waiting | finish p50 | p99 | arrival p50 | p99 |")
    print("|---|---|---|---|---|---|")
    for (running, waiting), m in default.items():
        if running == counts[0]:
            continue
        low = default[counts[0], waiting]
        ratios = (m[k] / low[k] for k in ("finish p50", "finish p99", "arrival p50", "arrival p99"))
        print(f"| {running:,} | {waiting:,} | " + " | ".join(f"{x:.2f}" for x in ratios) + " |")


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


if __name__ == "__main__":
    main()
