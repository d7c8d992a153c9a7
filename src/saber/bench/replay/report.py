"""A replay's figures: per engine and load, each policy's share of requests within SLA
(mean over the windows), the best static B in hindsight, and the default's gaps to
vLLM alone and to the best static B with their 95% intervals over the windows (the
runs compared serve the same windows, so the interval is that of the per-window
differences: Student's t, as the engine matrix's)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import scipy.stats

from saber.bench._grid import DEFAULT
from saber.bench._report import dumps
from saber.bench.matrix.run import CEILING, Served
from saber.bench.matrix.summary import BEST, CONFIDENCE, LoadRow, _diffs, _se, load_row
from saber.bench.replay.run import VLLM, ReplayRun, WindowRun
from saber.workload import UNNAMED_TASK


@dataclass(frozen=True)
class Interval:
    """A mean gap in points and the half-width of its ``CONFIDENCE`` interval (nan under
    two windows)."""

    mean: float
    half: float

    def __str__(self) -> str:
        return f"{self.mean:+.1f}" + ("" if math.isnan(self.half) else f" ± {self.half:.1f}")


def interval(diffs: Sequence[float]) -> Interval:
    if not diffs:
        return Interval(math.nan, math.nan)
    se = _se(diffs)
    t = float(scipy.stats.t.ppf(0.5 + CONFIDENCE / 2, len(diffs) - 1)) if len(diffs) > 1 else 0
    return Interval(statistics.fmean(diffs), t * se)


@dataclass(frozen=True)
class LoadSummary:
    """One engine at one load, over the measured windows."""

    preset: str
    multiple: float
    rps: float
    row: LoadRow  # goodput and refused in percent; by_seed: per window
    vs_vllm: Interval  # default - vLLM alone
    vs_best: Interval  # default - the best static B

    def to_json(self, policies: Sequence[str]) -> dict[str, Any]:
        r = self.row
        return {
            "engine": self.preset,
            "multiple": self.multiple,
            "rps": self.rps,
            "windows": r.seeds,
            "goodput": {
                VLLM: r.goodput[VLLM],
                BEST: r.best_static,
                **{p: r.goodput[p] for p in policies},
                CEILING: r.goodput[CEILING],
            },
            "refused": {VLLM: r.refused[VLLM], BEST: r.refused[BEST]}
            | {p: r.refused[p] for p in policies},
            "best_static_b": r.best_static_b,
            "static": {str(b): g for b, g in r.static.items()},
            "default_minus_vllm": dataclasses.asdict(self.vs_vllm),
            "default_minus_best_static": dataclasses.asdict(self.vs_best),
        }


def summarize(run: ReplayRun) -> list[LoadSummary]:
    """Every engine x load, in the replay's order."""
    by: dict[tuple[str, float], dict[int, dict[str, Served]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    rps: dict[tuple[str, float], float] = {}
    policies = set(run.policies)
    for w in run.runs:
        name = f"saber:{w.policy}" if w.policy in policies else w.policy
        by[(w.preset, w.multiple)][w.window][name] = Served(w.goodput, w.refused)
        rps[(w.preset, w.multiple)] = w.rps
    out = []
    for preset in run.replay.presets:
        for multiple in run.replay.rates:
            key = (preset, multiple)
            windows = by[key]
            row = load_row(rps[key], multiple, [windows[k] for k in sorted(windows)])
            vs_vllm = interval(_diffs(row, DEFAULT, VLLM))
            vs_best = interval(_diffs(row, DEFAULT, BEST))
            out.append(LoadSummary(preset, multiple, rps[key], row, vs_vllm, vs_best))
    return out


def to_json(run: ReplayRun, loads: Sequence[LoadSummary]) -> str:
    """The replay, each engine's set-up, one row per engine x load x window x policy
    (shares 0..1), and the per-load summary (percent)."""
    trace = run.trace
    return dumps(
        {
            "replay": dataclasses.asdict(run.replay),
            "trace": {
                "name": trace.name,
                "requests": len(trace.requests),
                "rate_rps": trace.rate,
                "window_size": trace.size,
                "warmup_first": trace.starts[0],
                "windows_first": list(trace.starts[1:]),
                "tasks": {n: t.model_dump() for n, t in trace.tasks.items()},
            },
            "goodput": None if run.replay.goodput is None else run.replay.goodput.describe(),
            "policies": list(run.policies),
            "engines": {
                name: {
                    "capacity_rps": s.capacity,
                    "alone_p90_s": s.alone_p90_s,
                    "sla_s": s.sla_s,
                    "slos": {n: t.slo.model_dump(exclude_none=True) for n, t in s.tasks.items()},
                    "speed_models": {k: dict(m.params) for k, m in s.models.items()},
                    "ttft": None if s.ttft is None else s.ttft.model_dump(),
                }
                for name, s in run.setups.items()
            },
            "rows": [_row(run, w) for w in run.runs],
            "loads": [s.to_json(run.policies) for s in loads],
        }
    )


def _row(run: ReplayRun, w: WindowRun) -> dict[str, Any]:
    fields = dataclasses.asdict(w)
    return {"trace": run.trace.name, "engine": fields.pop("preset"), **fields}


def _engine_line(run: ReplayRun, preset: str) -> str:
    s = run.setups[preset]
    line = f"vLLM alone saturates at {s.capacity:.3g} requests/s on this trace"
    goodput = run.replay.goodput
    if goodput is not None:
        slos = "; ".join(f"`{n}` {t.slo.describe()}" for n, t in s.tasks.items())
        return line + f"; SLOs `--goodput {goodput.describe()}`: {slos}"
    if s.alone_p90_s is not None and s.sla_s is not None:
        line += (
            f"; SLA of `{UNNAMED_TASK}` {s.sla_s:.3g} s ({run.replay.sla_scale:g} x the 90th "
            f"percentile alone, {s.alone_p90_s:.3g} s)"
        )
    return line


def markdown(run: ReplayRun, loads: Sequence[LoadSummary]) -> str:
    """A table per engine, a row per load: shares within SLA in percent."""
    replay, trace = run.replay, run.trace
    base = "its capacity" if replay.rate_of == "capacity" else "the trace's rate"
    out = [
        f"## Replay of {trace.name}\n",
        f"{replay.windows} windows, each of {trace.size} consecutive requests, from requests "
        f"{', '.join(str(s) for s in trace.starts[1:])} (the one from {trace.starts[0]} "
        f"warms up), of {len(trace.requests)} at {trace.rate:.3g}/s in the trace; load as a "
        f"multiple of {base}. Share of requests within SLA (%), mean over the windows; "
        f"best static = the best max_num_seqs per load in hindsight; gaps in points, "
        f"± the half-width of their {CONFIDENCE:.0%} interval over the windows.\n",
    ]
    head = ["load", "req/s", "vLLM alone", "best static (B)", *run.policies, "ceiling"]
    head += ["default - vLLM alone", "default - best static"]
    for preset in replay.presets:
        out += [
            f"### {preset}\n",
            _engine_line(run, preset) + ".\n",
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
        ]
        for s in (s for s in loads if s.preset == preset):
            r = s.row
            cells = [f"{s.multiple:g}x", f"{s.rps:.3g}", f"{r.goodput[VLLM]:.1f}"]
            cells.append(f"{r.best_static:.1f} ({r.best_static_b})")
            cells += [f"{r.goodput[p]:.1f}" for p in run.policies]
            cells += [f"{r.goodput[CEILING]:.1f}", str(s.vs_vllm), str(s.vs_best)]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def static_markdown(run: ReplayRun, loads: Sequence[LoadSummary]) -> str:
    """Every static B's share within SLA (%) per engine and load; refusals (%)."""
    bs = list(run.replay.batch_sizes)
    head = ["engine", "load", *(f"B={b}" for b in bs), "refused %: vLLM alone, default"]
    out = ["### Every static B\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in loads:
        r = s.row
        cells = [s.preset, f"{s.multiple:g}x", *(f"{r.static[b]:.1f}" for b in bs)]
        cells.append(f"{r.refused[VLLM]:.1f}, {r.refused[DEFAULT]:.1f}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
