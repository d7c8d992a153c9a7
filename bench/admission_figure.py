"""The figure of docs/admission.md: one request's chance of finishing in time, and where
the default policy admits, demotes and refuses it.

    .venv/bin/python bench/admission_figure.py [--out docs/admission/chance.png]

A code_generation request (the shipped task type: SLA 8 s, useful for 120 s, answers
of 387 tokens on average, capped at 1,024) arrives at t = 0 at a gateway holding the
shipped profile (saber-sim's ``paper`` preset) and waits. For each time it could
start, the scheduler's own ``chance_of`` gives the chance that it meets its SLA at
f(1) and at the speed of a busier engine; the chance of finishing within ``useful_s``
at f(1) decides the refusal. Prints the times at which it is demoted and refused.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from saber.config import load_gateway_config
from saber.gateway.control.settings import settings_from_config
from saber.scheduler import Policy, SchedRequest, Scheduler, request_for

TASK = "code_generation"
LOADS = (1, 32, 96)
EXAMPLE_COST = 0.3
"""An example of what one more sequence costs the others (running and to come): the
policy computes it at every decision; here a fixed one shows where admission falls."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/admission/chance.png"))
    args = parser.parse_args()
    config = load_gateway_config(env={})
    settings = settings_from_config(config)
    policy = Policy.from_config(config)
    task = config.tasks[TASK]
    sched = Scheduler(
        settings.speed_model(), policy, tasks=config.tasks, speed_sigma=settings.speed_sigma()
    )
    req = request_for(task, id="r", arrival=0.0, max_tokens=task.max_tokens, lengths=sched.lengths)
    assert task.useful_s is not None
    useful = SchedRequest("u", TASK, 0.0, task.useful_s, req.tokens, cap=req.cap)

    starts = np.linspace(0.0, task.sla_s, 400)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5), width_ratios=(3, 2))
    for load in LOADS:
        chance = [sched.chance_of(req, float(t), load) for t in starts]
        speed = sched.predicted_speed(load)
        ax.plot(starts, chance, label=f"started at L = {load} (f = {speed:.0f} tok/s)")
    demote = next(t for t in starts if sched.chance_of(req, float(t), 1) < policy.demote_below)
    ax.axhline(policy.demote_below, color="grey", lw=0.8, ls=":")
    ax.axvline(demote, color="tab:red", lw=1)
    ax.annotate(
        f"demoted at {demote:.1f} s:\nP at f(1) < {policy.demote_below}",
        (demote, 0.55), xytext=(-110, 0), textcoords="offset points", color="tab:red",
    )  # fmt: skip
    ax.axhline(EXAMPLE_COST, color="tab:green", lw=0.8, ls="--")
    ax.annotate(
        f"admitted while P at f(L+1) >= what it costs (here {EXAMPLE_COST})",
        (0.1, EXAMPLE_COST + 0.02), color="tab:green",
    )  # fmt: skip
    ax.set(
        xlabel="when it starts (s after arrival)",
        ylabel="P(meets its 8 s SLA)",
        title=f"{TASK}: mean answer {req.tokens} tokens, cap {req.cap}",
        ylim=(0, 1.02),
    )
    ax.legend(loc="upper right", fontsize=8)

    later = np.linspace(0.0, task.useful_s, 400)
    alive = [sched.chance_of(useful, float(t), 1) for t in later]
    refuse = next(t for t, p in zip(later, alive, strict=True) if p < policy.refuse_below)
    bx.plot(later, alive, color="tab:purple")
    bx.axhline(policy.refuse_below, color="grey", lw=0.8, ls=":")
    bx.axvline(refuse, color="tab:red", lw=1)
    bx.annotate(
        f"refused at {refuse:.0f} s:\nP < {policy.refuse_below}",
        (refuse, 0.5), xytext=(-90, 0), textcoords="offset points", color="tab:red",
    )  # fmt: skip
    bx.set(
        xlabel="when it starts (s after arrival)",
        ylabel=f"P(done within useful_s = {task.useful_s:.0f} s) at f(1)",
        title="demoted: served best effort until useless",
        ylim=(0, 1.02),
    )
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"demoted at {demote:.2f} s, refused at {refuse:.1f} s; wrote {args.out}")


if __name__ == "__main__":
    main()
