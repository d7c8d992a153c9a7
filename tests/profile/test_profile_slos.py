"""Help to choose SLOs (issue 47, item 4), on synthetic points with known answers: each
level's throughput, the levels at a quarter, half and three quarters of the capacity, each
task's TTFT, TPOT and e2e there, the suggested SLOs and their YAML, and the table kept in
the profile (the shipped profile, without it, still loads)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from saber.config import DEFAULT_PROFILE_DIR, Slo, parse_tasks
from saber.profile import Point
from saber.profile.slos import (
    UNNAMED,
    latency_table,
    level_throughputs,
    met_shares,
    round_up,
    share_level,
    slos_yaml,
    suggest_slos,
)
from saber.profile.slos.view import latency_view, met_levels, suggestions_view
from saber.speed import load_profile, save_profile

# "batch": 4 requests of 100 tokens at each level, TTFT 0.2 s, taking EXEC[L] s each:
# L x 100 / EXEC[L] tokens/s, 100, 160, 250, 400 and 320: the capacity is 400 at L=8, a
# quarter of it is L=1 (100), a half L=2 (160, nearer 200 than 250), three quarters L=4
# (250: L=16's 320 is nearer 300 but past the peak).
EXEC = {1: 1.0, 2: 1.25, 4: 1.6, 8: 2.0, 16: 5.0}
THROUGHPUT = {1: 100.0, 2: 160.0, 4: 250.0, 8: 400.0, 16: 320.0}
# "chat" at L=4 only, 101 tokens each at the same 62.5 tokens/s as batch's there (the
# level's throughput stays 250): e2e = TTFT + 100 x TPOT.
CHAT_TTFT = (0.5, 0.1, 0.3, 0.2, 0.4)
CHAT_TPOT = (0.016, 0.011, 0.013, 0.012, 0.0138)


def _point(level: int, tokens: int, exec_s: float, ttft: float | None, task: str | None) -> Point:
    return Point(level, float(level), 30, tokens, tokens, ttft, exec_s, 0.0, task)


def synthetic() -> list[Point]:
    points = [
        _point(level, 100, exec_s, 0.2, "batch") for level, exec_s in EXEC.items() for _ in range(4)
    ]
    points += [
        _point(4, 101, ttft + 100 * tpot, ttft, "chat")
        for ttft, tpot in zip(CHAT_TTFT, CHAT_TPOT, strict=True)
    ]
    points.append(_point(4, 125, 2.0, None, None))  # no task, no first token streamed
    return points


def test_each_level_s_throughput_and_the_levels_at_shares_of_the_capacity() -> None:
    throughputs = level_throughputs(synthetic())
    assert throughputs == pytest.approx(THROUGHPUT)
    assert [share_level(throughputs, s) for s in (0.25, 0.5, 0.75, 1.0)] == [1, 2, 4, 8]
    # Two levels as near: the lower one.
    assert share_level({1: 100.0, 2: 200.0, 4: 400.0}, 0.375) == 1


def test_the_table_gives_each_task_s_percentiles_at_each_share_s_level() -> None:
    table = latency_table(synthetic())
    assert table.capacity == pytest.approx(400.0) and table.capacity_level == 8
    assert [(r.task, r.share, r.level, r.points) for r in table.rows] == [
        ("batch", 0.25, 1, 4),
        ("batch", 0.5, 2, 4),
        ("batch", 0.75, 4, 4),
        ("chat", 0.75, 4, 5),
        (None, 0.75, 4, 1),
    ]
    batch, chat, unnamed = table.rows[2:]
    assert batch.ttft_p50_s == batch.ttft_p90_s == pytest.approx(0.2)
    assert batch.tpot_p90_s == pytest.approx((1.6 - 0.2) / 99)  # vLLM's rule
    assert batch.e2e_p90_s == pytest.approx(1.6)
    # Sorted TTFTs 0.1 .. 0.5: p50 the middle one, p90 0.4 + 0.6 x 0.1 (linear).
    assert (chat.ttft_p50_s, chat.ttft_p90_s) == pytest.approx((0.3, 0.46))
    assert (chat.tpot_p50_s, chat.tpot_p90_s) == pytest.approx((0.013, 0.0138 + 0.6 * 0.0022))
    assert (chat.e2e_p50_s, chat.e2e_p90_s) == pytest.approx((1.6, 1.78 + 0.6 * 0.32))
    assert unnamed.ttft_p90_s is None and unnamed.tpot_p90_s is None
    assert unnamed.e2e_p50_s == unnamed.e2e_p90_s == 2.0


@pytest.mark.parametrize(
    ("seconds", "limit"),
    [(0.92, 1.0), (0.03024, 0.04), (3.944, 4.0), (0.3, 0.3), (0.2501, 0.3), (7.0, 8.0),
     (8.01, 10.0), (1.1e-5, 1.2e-5), (0.029999999999999999, 0.03), (0.0282828, 0.03)],
)  # fmt: skip
def test_limits_are_rounded_up_to_numbers_a_person_states(seconds: float, limit: float) -> None:
    assert round_up(seconds) == limit  # exactly the decimal: no 0.30000000000000004


def test_the_suggestions_are_twice_each_p90_at_three_quarters_rounded_up() -> None:
    slos = suggest_slos(latency_table(synthetic()))
    assert slos == {
        "batch": Slo(ttft_s=0.4, tpot_s=0.03, e2e_s=4.0),  # 0.4, 0.0283, 3.2
        "chat": Slo(ttft_s=1.0, tpot_s=0.04, e2e_s=4.0),  # 0.92, 0.0302, 3.944
        UNNAMED: Slo(e2e_s=4.0),  # no first token streamed: e2e only
    }
    # How many requests met every part of their task's suggestion, by level: batch's e2e
    # of 5 s at L=16 misses its 4.
    met = met_shares(synthetic(), slos, [1, 4, 16])
    assert met["batch"] == {1: 1.0, 4: 1.0, 16: 0.0}
    assert met["chat"] == {1: None, 4: 1.0, 16: None}


def test_the_yaml_is_what_a_config_s_tasks_take() -> None:
    slos = suggest_slos(latency_table(synthetic()))
    text = slos_yaml(slos, ["suggested by a test"])
    assert text.startswith("# suggested by a test\ntasks:\n")
    assert "  chat: {ttft_s: 1.0, tpot_s: 0.04, e2e_s: 4.0}\n" in text
    read = yaml.safe_load(text)["tasks"]
    assert {task: Slo(**parts) for task, parts in read.items()} == slos
    # Merged into task types in place of their sla_s, they validate, every part stated.
    tasks = {
        name: {"mean_input_tokens": 30, "mean_output_tokens": 100, "max_tokens": 200, **parts}
        for name, parts in read.items()
    }
    assert parse_tasks({"tasks": tasks}, "test")["chat"].slo == slos["chat"]


def test_the_tables_print_the_levels_and_the_figures() -> None:
    table = latency_table(synthetic())
    slos = suggest_slos(table)
    levels = met_levels(table)
    assert levels == {1: "1/4", 2: "1/2", 4: "3/4", 8: "capacity", 16: "highest"}
    console = Console(file=io.StringIO(), width=200)
    console.print(latency_view(table))
    console.print(suggestions_view(slos, met_shares(synthetic(), slos, list(levels)), levels))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "Latency at shares of capacity (at most 400 output tokens/s, at L=8)" in text
    chat = "│ chat    │   3/4 │ 4 │ 250 (63%) │ 5 │         300 │ 460 │        13.0 │ 15.1 │"
    assert chat in text
    assert "met L=16 (highest)" in text
    assert "│ batch   │    0.4 │   0.03 │     4 │" in text


def test_the_profile_keeps_the_table_and_the_shipped_one_loads_without_it(tmp_path: Path):
    shipped = json.loads((DEFAULT_PROFILE_DIR / "saber-sim-paper.json").read_text())
    assert load_profile(DEFAULT_PROFILE_DIR / "saber-sim-paper.json").profiling is None
    table = latency_table(synthetic())
    profiling = {
        "source": "workload W3",
        "endpoint": "completions",
        "levels": [1, 2, 4, 8, 16],
        "requests_per_level": 4,
        "warmup": "L requests at load L",
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**shipped, "profiling": profiling}))  # before the table
    info = load_profile(path).profiling
    assert info is not None and info.latencies is None
    path.write_text(
        json.dumps({**shipped, "profiling": {**profiling, "latencies": table.model_dump()}})
    )
    info = load_profile(path).profiling
    assert info is not None and info.latencies == table
    # As saber-profile writes it (no None fields: the unnamed task's row has no task).
    save_profile(load_profile(path), tmp_path / "again.json")
    again = load_profile(tmp_path / "again.json").profiling
    assert again is not None and again.latencies == table
