"""Scenarios beyond the paper's bursts: what a gateway lives through for days.

Each scenario is a long trace on the engine model in virtual time, realistic mode
(clients send their task's cap as ``max_tokens``), with the task types the gateway
ships, served in several ways on the same trace: every static ``max_num_seqs`` B of
the sweep, vLLM's default 256, the paper's rule, and the shipped default
(closed-loop policy, online refit on). The drift scenarios add the default without
refit, without any learning, and with the true profile; the TTFT scenario adds the
default scheduling code completion by an end-to-end SLA instead of its TTFT one.
Goodput is reported over the whole run and per phase, every run scored by the
shipped task types' SLAs.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from saber.bench._grid import PAPER_BATCH_SIZES, VLLM_DEFAULT_MAX_NUM_SEQS
from saber.bench._runner import rescore
from saber.config import TaskType, Workload
from saber.engine import Engine, get_preset
from saber.scheduler import Policy, Scheduler, TTFTFn
from saber.sim import SimRecord, SimResult, simulate
from saber.speed import LiveFit, SpeedModel
from saber.workload import generate_phased_trace


@dataclass(frozen=True)
class Scenario:
    """A long run: arrival phases (duration s, RPS), the engine serving it, what the
    profile was fitted on, and engine changes during the run."""

    name: str
    description: str
    workload: str
    phases: tuple[tuple[float, float], ...]
    phase_names: tuple[str, ...]
    arrival: Literal["poisson", "gamma"] = "poisson"
    cv: float = 1.0
    serve: str = "paper"  # the engine preset that serves
    profile: str = "paper"  # the preset the gateway's profile was fitted on
    drift: tuple[tuple[float, str], ...] = ()  # (time s, preset) from then on
    mix: tuple[tuple[str, float], ...] = ()  # a task mix of its own, instead of workload's
    focus: str | None = None  # a task whose own goodput is reported too
    # (task, factor): its answers are really this many times the configured mean length.
    lengths: tuple[tuple[str, float], ...] = ()

    @property
    def duration(self) -> float:
        return sum(d for d, _ in self.phases)

    @property
    def drifts(self) -> bool:
        return self.serve != self.profile or bool(self.drift)

    def true_tasks(self, tasks: Mapping[str, TaskType]) -> Mapping[str, TaskType]:
        """The task types the trace is drawn from: the configured ones, with the
        scenario's true answer lengths."""
        out = dict(tasks)
        for name, factor in self.lengths:
            t = tasks[name]
            mean = max(1, min(round(t.mean_output_tokens * factor), t.max_tokens))
            out[name] = t.model_copy(update={"mean_output_tokens": mean})
        return out

    def workload_of(self, workloads: Mapping[str, Workload]) -> Workload:
        if self.mix:
            return Workload(name=self.name, mix=dict(self.mix))
        return workloads[self.workload]


def _bursty(workload: str, rps: float) -> Scenario:
    """Gamma arrivals with CV 3 for 400 s: bursts around a steady mean."""
    requests = round(400 * rps)
    return Scenario(
        f"bursty-{workload}",
        f"{workload}, {requests:,} requests: gamma arrivals with CV 3 at {rps:g} RPS on average",
        workload,
        ((400.0, rps),),
        ("all",),
        arrival="gamma",
        cv=3.0,
    )


def _step(workload: str, low: float, burst: float, recovery: float) -> Scenario:
    """A load step: 2 min low, a 30 s burst, 2.5 min back at a higher steady rate."""
    return Scenario(
        f"step-{workload}",
        f"{workload}: 2 min at {low:g} RPS, a 30 s burst at {burst:g} RPS, "
        f"then 2.5 min at {recovery:g} RPS",
        workload,
        ((120.0, low), (30.0, burst), (150.0, recovery)),
        ("low", "burst", "recovery"),
    )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        _bursty("W3", 6.0),
        _bursty("W1", 4.0),
        _step("W3", 3.0, 20.0, 6.0),
        _step("W1", 2.0, 12.0, 4.0),
        Scenario(
            "drift-profile",
            "W3 at 4 RPS for 8 min on an engine 1.5x slower than the profile says",
            "W3",
            ((60.0, 4.0), (420.0, 4.0)),
            ("first minute", "after"),
            serve="paper-slow",
        ),
        Scenario(
            "ttft-completion",
            "editor-heavy: 60% code completion, 20% QnA, 10% generation, 10% translation, "
            "15 RPS for 2 min",
            "",
            ((120.0, 15.0),),
            ("all",),
            mix=(
                ("code_completion", 0.6),
                ("code_qna", 0.2),
                ("code_generation", 0.1),
                ("code_translation", 0.1),
            ),
            focus="code_completion",
        ),
        Scenario(
            "lengths-longer",
            "W3 at 4 RPS for 6 min; every answer twice as long as the configured mean "
            "(a wordier model than the one the config was written for)",
            "W3",
            ((360.0, 4.0),),
            ("all",),
            lengths=tuple(
                (task, 2.0)
                for task in ("code_generation", "code_translation", "code_qna", "code_summary")
            ),
        ),
        Scenario(
            "drift-midrun",
            "W3 at 4 RPS for 10 min; after 4 min the engine becomes 1.5x slower",
            "W3",
            ((240.0, 4.0), (60.0, 4.0), (300.0, 4.0)),
            ("before", "first minute slow", "after"),
            drift=((240.0, "paper-slow"),),
        ),
    )
}


@dataclass(frozen=True)
class Contender:
    """One way of serving a scenario's trace."""

    name: str
    static: int | None = None  # max_num_seqs of a bare engine; None: behind a scheduler
    policy: Policy | None = None
    refit: bool = False
    true_profile: bool = False
    e2e: str | None = None  # schedule this TTFT-SLA task by an end-to-end SLA instead


def contenders(scenario: Scenario, batch_sizes: Sequence[int]) -> list[Contender]:
    out = [Contender(f"static B={b}", static=b) for b in batch_sizes]
    out.append(Contender(f"vLLM default ({VLLM_DEFAULT_MAX_NUM_SEQS})", static=256))
    out.append(Contender("paper", policy=Policy.named("paper")))
    closed = Policy.named("closed-loop")
    out.append(Contender("default", policy=closed, refit=True))
    if scenario.drifts:
        out.append(Contender("default, no refit", policy=closed))
        open_loop = Policy.named("closed-loop", calibrate=False, learn_lengths=False)
        out.append(Contender("default, no learning", policy=open_loop))
        out.append(Contender("default, true profile", policy=closed, refit=True, true_profile=True))
    if scenario.lengths:
        unlearned = Policy.named("closed-loop", learn_lengths=False)
        out.append(Contender("default, lengths not learned", policy=unlearned, refit=True))
    if scenario.focus is not None:
        out.append(
            Contender(f"default, {scenario.focus} end to end", policy=closed, refit=True,
                      e2e=scenario.focus)
        )  # fmt: skip
    return out


E2E_INSTEAD_S = 1.5
"""The end-to-end SLA a TTFT task is scheduled by in the comparison (what the gateway
shipped for code completion before it had TTFT SLAs)."""


def _scheduled_tasks(tasks: Mapping[str, TaskType], c: Contender) -> Mapping[str, TaskType]:
    if c.e2e is None:
        return tasks
    changed = tasks[c.e2e].model_copy(update={"sla_kind": "e2e", "sla_s": E2E_INSTEAD_S})
    return {**tasks, c.e2e: changed}


@dataclass(frozen=True)
class Outcome:
    """A contender's goodput on one scenario, averaged over seeds (0..100)."""

    contender: str
    goodput: float
    phases: list[float]
    swaps: float = 0.0  # refits swapped in, per run
    focus: float | None = None  # the focus task's own goodput


def phase_goodput(
    records: Sequence[SimRecord], bounds: Sequence[tuple[float, float]]
) -> list[float]:
    """Goodput (0..100) of the requests that arrived within each (start, end)."""
    return [_goodput([r for r in records if start <= r.arrival < end]) for start, end in bounds]


def _goodput(records: Sequence[SimRecord]) -> float:
    return 100.0 * sum(r.met_sla for r in records) / len(records) if records else float("nan")


def _phase_bounds(scenario: Scenario) -> list[tuple[float, float]]:
    bounds, start = [], 0.0
    for duration, _ in scenario.phases:
        bounds.append((start, start + duration))
        start += duration
    return bounds


def run_scenario(
    scenario: Scenario,
    tasks: Mapping[str, TaskType],
    workloads: Mapping[str, Workload],
    models: Callable[[str], tuple[SpeedModel, TTFTFn | None]],
    *,
    seeds: Sequence[int],
    batch_sizes: Sequence[int] = PAPER_BATCH_SIZES,
    advance: Callable[[], None] = lambda: None,
) -> list[Outcome]:
    """Every contender on ``seeds`` traces of ``scenario``. ``models(preset)`` is the
    speed profile fitted on that engine preset: f(L), and a TTFT fit."""
    serve = get_preset(scenario.serve)
    drift = [(t, get_preset(name)) for t, name in scenario.drift]
    bounds = _phase_bounds(scenario)
    runs: dict[str, list[tuple[SimResult, list[SimRecord]]]] = {}
    for seed in seeds:
        trace = generate_phased_trace(
            scenario.workload_of(workloads),
            scenario.true_tasks(tasks),
            phases=scenario.phases,
            seed=seed,
            mode="realistic",
            arrival=scenario.arrival,
            cv=scenario.cv,
        )
        for c in contenders(scenario, batch_sizes):
            engine = Engine(serve, max_num_seqs=c.static or VLLM_DEFAULT_MAX_NUM_SEQS)
            if c.static is not None:
                result = simulate(trace, engine, tasks=tasks, drift=drift)
            else:
                assert c.policy is not None
                truth = scenario.drift[-1][1] if scenario.drift else scenario.serve
                model, ttft = models(truth if c.true_profile else scenario.profile)
                scheduled = _scheduled_tasks(tasks, c)
                sched = Scheduler(
                    model,
                    dataclasses.replace(c.policy, max_concurrency=VLLM_DEFAULT_MAX_NUM_SEQS),
                    tasks=scheduled,
                    ttft=ttft,
                    seed=seed,
                )
                result = simulate(
                    trace,
                    engine,
                    tasks=scheduled,
                    scheduler=sched,
                    refit=LiveFit() if c.refit else None,
                    drift=drift,
                )
            runs.setdefault(c.name, []).append((result, rescore(result.records, tasks)))
            advance()
    focus = scenario.focus
    return [
        Outcome(
            name,
            statistics.fmean(_goodput(recs) for _, recs in done),
            [
                statistics.fmean(phase_goodput(recs, bounds)[i] for _, recs in done)
                for i in range(len(bounds))
            ],
            statistics.fmean(len(r.swaps) for r, _ in done),
            None
            if focus is None
            else statistics.fmean(
                _goodput([x for x in recs if x.task == focus]) for _, recs in done
            ),
        )
        for name, done in runs.items()
    ]


def runs_per_scenario(scenario: Scenario, batch_sizes: Sequence[int]) -> int:
    return len(contenders(scenario, batch_sizes))


def summary(scenario: Scenario, outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The figures the issue asks for: the default against the best static B and
    vLLM's default over the whole run, and its worst phase against vLLM alone."""
    by = {o.contender: o for o in outcomes}
    static = [o for o in outcomes if o.contender.startswith("static B=")]
    best = max(static, key=lambda o: o.goodput)
    vllm = by[f"vLLM default ({VLLM_DEFAULT_MAX_NUM_SEQS})"]
    default = by["default"]
    out: dict[str, Any] = {
        "best_static": best.contender,
        "default_minus_best_static": default.goodput - best.goodput,
        "default_minus_vllm_default": default.goodput - vllm.goodput,
        "worst_phase_minus_vllm_default": min(
            d - v for d, v in zip(default.phases, vllm.phases, strict=True)
        ),
    }
    if scenario.lengths:
        out["default_minus_unlearned"] = (
            default.goodput - by["default, lengths not learned"].goodput
        )
    if scenario.focus is not None:
        e2e = by[f"default, {scenario.focus} end to end"]
        assert default.focus is not None and e2e.focus is not None
        out["focus_minus_e2e"] = default.focus - e2e.focus
    if "default, true profile" in by:
        true = by["default, true profile"]
        out["after_first_minute_minus_true_profile"] = {
            name: by[name].phases[-1] - true.phases[-1]
            for name in ("default", "default, no refit", "default, no learning")
        }
    return out


def markdown(scenario: Scenario, outcomes: Sequence[Outcome]) -> str:
    head = ["served by", "goodput %", *(f"{p} %" for p in scenario.phase_names)]
    if scenario.focus is not None:
        head.append(f"{scenario.focus} %")
    head.append("refits swapped")
    lines = [
        f"#### {scenario.name}: {scenario.description}\n",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for o in outcomes:
        cells = [o.contender, f"{o.goodput:.1f}", *(f"{p:.1f}" for p in o.phases)]
        if o.focus is not None:
            cells.append(f"{o.focus:.1f}")
        cells.append(f"{o.swaps:.1f}" if o.contender.startswith("default") else "")
        lines.append("| " + " | ".join(cells) + " |")
    s = summary(scenario, outcomes)
    lines.append("")
    lines.append(
        f"Default against the best static B ({s['best_static']}): "
        f"{s['default_minus_best_static']:+.1f} points; against vLLM's default: "
        f"{s['default_minus_vllm_default']:+.1f}; worst phase against vLLM's default: "
        f"{s['worst_phase_minus_vllm_default']:+.1f}."
    )
    if "default_minus_unlearned" in s:
        lines.append(
            f"Learned lengths against the configured ones: {s['default_minus_unlearned']:+.1f} "
            "points."
        )
    if "focus_minus_e2e" in s:
        lines.append(
            f"{scenario.focus} on time (first token within its TTFT SLA): "
            f"{s['focus_minus_e2e']:+.1f} points for its TTFT SLA against scheduling it "
            f"by a {E2E_INSTEAD_S:g} s end-to-end SLA."
        )
    if "after_first_minute_minus_true_profile" in s:
        diffs = ", ".join(
            f"{k} {v:+.1f}" for k, v in s["after_first_minute_minus_true_profile"].items()
        )
        lines.append(f"Last phase against the run given the true profile: {diffs}.")
    lines.append("")
    return "\n".join(lines)
