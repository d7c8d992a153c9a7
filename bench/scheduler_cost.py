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
measured in the same run: the paper's is the baseline the ratio is taken against.
Then a poll half a round later with nothing reported between ("unchanged": a pool
polls every backend at each event, and the scheduler's timer polls when nothing
happened), and the events: a finish (``finish``) and an arrival (``offer``, whose own
``poll`` searches the changed queue afresh and prices the running requests).
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


def build(policy: Policy, running: int, waiting: int) -> tuple[Scheduler, float, dict[str, float]]:
    """``running`` requests admitted one after the other, then ``waiting`` that can never
    be admitted; returns the scheduler, the time the last of them arrived, and when each
    running request was admitted."""
    tasks = benchmark_tasks()
    sched = Scheduler(USL, policy, tasks=tasks, seed=0)
    names = sorted(t for t in tasks if t != "code_completion")  # useful for a minute or more
    at = 0.0
    admitted: dict[str, float] = {}
    for i in range(running):  # each needs 10 tokens in 10,000 s: admitted on arrival
        sched.offer(SchedRequest(f"run{i}", names[i % len(names)], at, at + 1e4, 10, cap=1000), at)
        while sched.load <= i:  # held for the arrivals to come: admitted at a wake-up
            wake = sched.next_wakeup()
            assert wake is not None and wake < 1e4, f"run{i} would never be admitted"
            at = max(at, wake)
            sched.poll(at)
        admitted[f"run{i}"] = at
        at += SPACING_S
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
    return sched, start, admitted


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
    sched, now, started = build(policy, running_count, waiting)
    times: list[float] = []
    unchanged: list[float] = []
    finishes: list[float] = []
    arrivals_us: list[float] = []
    tick = TICK_S
    running = [f"run{i}" for i in range(running_count)]
    speed = USL(running_count)  # each running request makes tokens as fast as f(L) predicts
    arrivals = waiting
    gc.collect()
    gc.disable()
    try:
        for k in range(rounds):
            now += tick
            for j in range(8):  # a few frames arrived since the last round
                rid = running[(k * 8 + j) % len(running)]
                sched.progress(rid, int(speed * (now - started[rid])), now)
            # A finish and an arrival every EVENT_EVERY rounds, while half the running
            # remain (the paper's window may leave the arrival behind the front of the
            # queue).
            if k % EVENT_EVERY == EVENT_EVERY - 1 and len(running) > running_count // 2:
                done = running.pop(0)
                new = f"run-new{k}"
                start = time.perf_counter_ns()
                sched.finish(done, now, max(int(speed * (now - started.pop(done))), 1))
                mid = time.perf_counter_ns()
                sched.offer(SchedRequest(new, "code_qna", now, now + 1e4, 10, cap=256), now)
                end = time.perf_counter_ns()
                finishes.append((mid - start) / 1000)
                arrivals_us.append((end - mid) / 1000)
                if sched.is_running(new):
                    running.append(new)
                    started[new] = now
                arrivals += 1
            start = time.perf_counter_ns()
            sched.poll(now)
            times.append((time.perf_counter_ns() - start) / 1000)
            start = time.perf_counter_ns()
            sched.poll(now + tick / 2)
            unchanged.append((time.perf_counter_ns() - start) / 1000)
    finally:
        gc.enable()
    return dict(zip(PARTS, (times, unchanged, finishes, arrivals_us), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--running", default=",".join(map(str, RUNNING)))
    parser.add_argument("--waiting", default=",".join(map(str, SIZES)))
    args = parser.parse_args()
    policies = {name: Policy.named(name) for name in ("closed-loop", "mean", "paper")}
    print(f"one poll per round, {args.rounds} rounds; microseconds")
    print(
        "| running | waiting | policy | poll p50 | p99 | max | p99 / paper's "
        "| unchanged p50 | p99 | finish p50 | p99 | arrival p50 | p99 | p99 / paper's |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    cells = [(int(r), int(w)) for r in args.running.split(",") for w in args.waiting.split(",")]
    for running, waiting in cells:
        runs = {name: measure(p, running, waiting, args.rounds) for name, p in policies.items()}
        base = {part: pct(sorted(xs), 0.99) for part, xs in runs["paper"].items()}
        for name, parts in runs.items():
            label = "default (closed-loop)" if name == "closed-loop" else name
            polls, same, done, came = (sorted(parts[k]) for k in PARTS)
            print(
                f"| {running:,} | {waiting:,} | {label} | {statistics.median(polls):.1f} "
                f"| {pct(polls, 0.99):.1f} | {polls[-1]:.0f} "
                f"| {pct(polls, 0.99) / base['poll']:.2f} "
                f"| {statistics.median(same):.1f} | {pct(same, 0.99):.1f} "
                f"| {statistics.median(done):.0f} | {pct(done, 0.99):.0f} "
                f"| {statistics.median(came):.0f} | {pct(came, 0.99):.0f} "
                f"| {pct(came, 0.99) / base['arrival']:.2f} |"
            )


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


if __name__ == "__main__":
    main()
