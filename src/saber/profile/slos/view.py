"""saber-profile's tables for choosing SLOs: the latency table and the suggestions."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from rich.table import Table

from saber.config import PARTS, Slo
from saber.profile.slos.suggest import MARGIN, SHARE, STEPS, UNNAMED
from saber.speed import LatencyTable


def share_text(share: float) -> str:
    """0.75 -> "3/4"."""
    return str(Fraction(share).limit_denominator(100))


def latency_view(table: LatencyTable) -> Table:
    """Per task type and share of the capacity: the level used, its throughput and the
    task's TTFT, TPOT and e2e, p50 and p90."""
    view = Table(
        title=f"Latency at shares of capacity (at most {table.capacity:,.0f} {table.unit}, "
        f"at L={table.capacity_level})",
        caption="L: the level nearest each share, up to the capacity's; TPOT: (e2e - TTFT) / "
        "(tokens - 1), vLLM's rule",
    )
    for column in ("task", "share", "L", "tok/s", "n", "TTFT p50 ms", "p90", "TPOT p50 ms",
                   "p90", "e2e p50 s", "p90"):  # fmt: skip
        view.add_column(column, justify="left" if column == "task" else "right", no_wrap=True)
    for row in table.rows:
        throughput = table.throughputs[row.level]
        view.add_row(
            row.task or UNNAMED,
            share_text(row.share),
            str(row.level),
            f"{throughput:,.0f} ({throughput / table.capacity:.0%})",
            str(row.points),
            _ms(row.ttft_p50_s),
            _ms(row.ttft_p90_s),
            _ms(row.tpot_p50_s, "{:.1f}"),
            _ms(row.tpot_p90_s, "{:.1f}"),
            f"{row.e2e_p50_s:.2f}",
            f"{row.e2e_p90_s:.2f}",
        )
    return view


def met_levels(table: LatencyTable) -> dict[int, str]:
    """The levels the suggestions' table shows, each with what it is: the shares of the
    capacity it stands for, the capacity's own level, and the highest measured."""
    labels: dict[int, list[str]] = {}
    for row in table.rows:
        shares = labels.setdefault(row.level, [])
        if share_text(row.share) not in shares:
            shares.append(share_text(row.share))
    labels.setdefault(table.capacity_level, []).append("capacity")
    labels.setdefault(max(table.throughputs), []).append("highest")
    return {level: ", ".join(dict.fromkeys(labels[level])) for level in sorted(labels)}


def suggestions_view(
    slos: Mapping[str, Slo],
    met: Mapping[str, Mapping[int, float | None]],
    levels: Mapping[int, str],
) -> Table:
    """Each task's suggested limits, and the share of its requests that met all of them at
    each of ``levels`` (level: what it stands for)."""
    steps = ", ".join(f"{s:g}" for s in STEPS)
    view = Table(
        title=f"Suggested SLOs: {MARGIN:g} x p90 at {share_text(SHARE)} of capacity, in s",
        caption=f"rounded up to {steps} x 10^k; met: the task's requests at that level that "
        "met every part",
    )
    met_columns = [f"met L={level} ({what})" for level, what in levels.items()]
    for column in ("task", "ttft_s", "tpot_s", "e2e_s", *met_columns):
        view.add_column(
            column, justify="left" if column == "task" else "right", no_wrap=column == "task"
        )
    for task, slo in slos.items():
        limits = [f"{v:g}" if (v := slo.limit(p)) is not None else "-" for p in PARTS]
        shares = [("-" if (m := met[task].get(lv)) is None else f"{m:.0%}") for lv in levels]
        view.add_row(task, *limits, *shares)
    return view


def _ms(seconds: float | None, form: str = "{:.0f}") -> str:
    return "-" if seconds is None else form.format(1000 * seconds)
