"""What an admission round costs: the scheduler's time per poll, live progress on.

    .venv/bin/python bench/scheduler_cost.py [--rounds 3000]

256 requests run (no cap stops admission, so every round tries to admit), and 10,
1,000 or 10,000 wait in the HPQs of four task types, each needing more than f(257)
so that nothing passes and every round scans its whole window: the worst case of a
full engine with a long queue. Each round also reports the generated-token count
of 8 running requests (``progress``, as the relay does per frame), and every 50
rounds one running request finishes (``finish`` teaches the learned lengths and the
calibration) and one more arrives (``offer``), so learning runs throughout.

Prints, per queue size, p50 / p99 / max of one ``poll`` in microseconds for the
default policy (closed-loop), the previous default (mean) and the paper's rule,
measured in the same run: the paper's is the baseline the ratio is taken against.
Most rounds change nothing the admission check reads (the default then skips it);
the last columns time the rounds that do, a finish and an arrival (``finish`` and
``offer``, whose own ``poll`` searches the changed queue afresh).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from saber.config import load_gateway_config
from saber.scheduler import Policy, SchedRequest, Scheduler
from saber.speed import MODELS

RUNNING = 256
SIZES = (10, 1_000, 10_000)
USL = MODELS["usl"].from_params(lam=130.0, sigma=0.0477, kappa=0.000154)


def build(policy: Policy, waiting: int) -> Scheduler:
    tasks = load_gateway_config(env={}).tasks
    sched = Scheduler(USL, policy, tasks=tasks, seed=0)
    names = sorted(t for t in tasks if t != "code_completion")  # useful for a minute or more
    for i in range(RUNNING):  # admitted at once: each needs 1 tok/s
        sched.offer(SchedRequest(f"run{i}", names[i % len(names)], 0.0, 1000.0, 10, cap=1000), 0.0)
    assert sched.load == RUNNING
    f_next = sched.predicted_speed(RUNNING + 1)
    for i in range(waiting):  # each needs 2 x f(257): stays in the HPQ, never admitted
        task = names[i % len(names)]
        # Exact: its length is known (a client's ignore_eos), so the default policy's
        # chance of finishing in time is no guess.
        need = int(200 * f_next)
        sched.offer(SchedRequest(f"w{i:06d}", task, 0.0, 100.0, need, cap=4096, exact=True), 0.0)
    assert sched.queued() == waiting and sched.load == RUNNING
    return sched


def measure(policy: Policy, waiting: int, rounds: int) -> tuple[list[float], list[float]]:
    """Microseconds per ``poll``, and per finish-and-arrival."""
    sched = build(policy, waiting)
    times: list[float] = []
    events: list[float] = []
    now, tick = 0.0, 0.01
    running = [f"run{i}" for i in range(RUNNING)]
    started = dict.fromkeys(running, 0.0)
    speed = USL(RUNNING)  # each running request makes tokens as fast as f(L) predicts
    arrivals = waiting
    gc.collect()
    gc.disable()
    try:
        for k in range(rounds):
            now += tick
            for j in range(8):  # a few frames arrived since the last round
                rid = running[(k * 8 + j) % len(running)]
                sched.progress(rid, int(speed * (now - started[rid])), now)
            if k % 50 == 49:
                done = running.pop(0)
                new = f"run-new{k}"
                start = time.perf_counter_ns()
                sched.finish(done, now, max(int(speed * (now - started.pop(done))), 1))
                sched.offer(SchedRequest(new, "code_qna", now, now + 1000.0, 10, cap=256), now)
                events.append((time.perf_counter_ns() - start) / 1000)
                if sched.is_running(new):
                    running.append(new)
                    started[new] = now
                arrivals += 1
            start = time.perf_counter_ns()
            sched.poll(now)
            times.append((time.perf_counter_ns() - start) / 1000)
    finally:
        gc.enable()
    return times, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    args = parser.parse_args()
    policies = {name: Policy.named(name) for name in ("closed-loop", "mean", "paper")}
    print(f"{RUNNING} running; one poll per round, {args.rounds} rounds; microseconds")
    print(
        "| waiting | policy | p50 | p99 | max | p99 / paper's "
        "| finish + arrival p50 | p99 | p99 / paper's |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for waiting in SIZES:
        runs = {name: measure(p, waiting, args.rounds) for name, p in policies.items()}
        times = {name: sorted(polls) for name, (polls, _) in runs.items()}
        events = {name: sorted(changes) for name, (_, changes) in runs.items()}
        base, event_base = pct(times["paper"], 0.99), pct(events["paper"], 0.99)
        for name, xs in times.items():
            label = "default (closed-loop)" if name == "closed-loop" else name
            ev = events[name]
            print(
                f"| {waiting:,} | {label} | {statistics.median(xs):.1f} | {pct(xs, 0.99):.1f} "
                f"| {xs[-1]:.0f} | {pct(xs, 0.99) / base:.2f} | {statistics.median(ev):.0f} "
                f"| {pct(ev, 0.99):.0f} | {pct(ev, 0.99) / event_base:.2f} |"
            )


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


if __name__ == "__main__":
    main()
