from __future__ import annotations

import dataclasses
import itertools
import json
from collections import defaultdict

import pytest

from saber.bench._grid import shipped_tasks
from saber.bench.cli import main
from saber.bench.replay import run as replay_run
from saber.bench.replay.run import Replay, Shared, Unit, prepare, serve_policy
from saber.bench.replay.tasks import cap_of, trace_tasks, with_caps
from saber.bench.replay.windows import mean_rate, scaled, window_starts
from saber.engine import PRESETS
from saber.workload import NO_CAP, UNNAMED_TASK, TraceRequest


def req(i: int, arrival: float, task: str = UNNAMED_TASK, **kw) -> TraceRequest:
    fields = {"prompt_tokens": 50, "output_tokens": 10 + i, "max_tokens": NO_CAP} | kw
    return TraceRequest(id=f"r{i}", task=task, arrival=arrival, **fields)


# -- windows ------------------------------------------------------------------------


def test_a_scaled_window_keeps_order_and_spacing_and_hits_the_rate():
    window = [req(i, t) for i, t in enumerate([100.0, 100.5, 100.6, 104.0, 110.0])]
    assert mean_rate(window) == pytest.approx(4 / 10.0)
    for rate in (0.05, 2.0, 37.0):
        out = scaled(window, rate)
        assert [r.id for r in out] == [r.id for r in window] and out[0].arrival == 0.0
        assert mean_rate(out) == pytest.approx(rate)
        # Every gap is the same share of the whole: bursts stay bursts.
        gaps = [b.arrival - a.arrival for a, b in itertools.pairwise(out)]
        assert [g / out[-1].arrival for g in gaps] == pytest.approx([0.05, 0.01, 0.34, 0.6])
        assert [(r.prompt_tokens, r.output_tokens) for r in out] == [
            (r.prompt_tokens, r.output_tokens) for r in window
        ]
    with pytest.raises(ValueError, match="do not all arrive at once"):
        mean_rate([req(0, 1.0), req(1, 1.0)])


def test_windows_spread_over_the_trace_or_consecutive_from_a_start():
    assert window_starts(1000, 3, 100) == [0, 300, 600, 900]
    assert window_starts(400, 3, 100) == [0, 100, 200, 300]
    assert window_starts(1000, 2, 100, start=150) == [150, 250, 350]
    with pytest.raises(ValueError, match="need 400 requests; the trace has 399"):
        window_starts(399, 3, 100)
    with pytest.raises(ValueError, match="from request 800"):
        window_starts(1000, 2, 100, start=800)


# -- task types and SLOs --------------------------------------------------------------


def test_requests_without_a_task_get_one_built_from_the_trace():
    trace = [req(0, 0.0, output_tokens=3), req(1, 1.0, output_tokens=513, max_tokens=600)]
    trace.append(req(2, 2.0, task="code_qna", prompt_tokens=9))
    tasks = trace_tasks(trace, shipped_tasks(), None)
    unnamed = tasks[UNNAMED_TASK]
    assert set(tasks) == {"code_qna", UNNAMED_TASK}
    assert (unnamed.max_tokens, unnamed.mean_output_tokens, unnamed.mean_input_tokens) == (
        1024, 258, 50,
    )  # fmt: skip
    capped = with_caps(trace, tasks)
    assert [r.max_tokens for r in capped] == [1024, 600, 256]  # a stated cap stays
    assert cap_of(trace[:1]) == 4 and cap_of(trace, 2048) == 2048
    with pytest.raises(ValueError, match="below the trace's longest answer"):
        cap_of(trace, 512)
    with pytest.raises(ValueError, match=r"names task type\(s\) chat"):
        trace_tasks([req(0, 0.0, task="chat")], shipped_tasks(), None)


# -- serving ------------------------------------------------------------------------


def test_each_window_starts_from_what_the_policy_learned_on_the_one_before(monkeypatch):
    replay = dataclasses.replace(Replay.quick("joint-W1"), window_size=60)
    trace = prepare(replay)
    preset = PRESETS["paper"]
    shared = Shared(replay, trace, PRESETS)
    setup = shared.setup(preset)
    shared = dataclasses.replace(shared, setups={"paper": setup})
    given = []
    restore = replay_run.restore
    monkeypatch.setattr(
        replay_run, "restore", lambda s, state: (given.append(state), restore(s, state))
    )
    rps = setup.capacity
    rows = shared.serve(Unit("paper", 1.0, rps, "default"))
    assert [r.window for r in rows] == [1, 2] and len(given) == 2
    # What a fresh default scheduler learns serving the warm-up window...
    _, first = serve_policy(scaled(trace.window(0), rps), preset, setup, "default", seed=0)
    assert given[0].lengths == first.lengths.state()
    assert given[0].prompts == first.lengths.prompts.state()
    assert given[0].calibration == first.calibration
    # ... is where the first measured window starts, and it learns on from there.
    observed = [sum(t["count"] for t in state.lengths.values()) for state in given]
    assert observed == [60, 120]
    assert given[0].prompts["observed"] == 60 and given[1].prompts["observed"] == 120


def rows_by_window(rows):
    out = defaultdict(dict)
    for r in rows:
        out[(r["engine"], r["multiple"], r["window"], r["first"])][r["policy"]] = r
    return out


def test_replay_cli_on_the_azure_code_trace(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["replay", "azure-code", "--quick", "--jobs", "2", "--no-progress",
                 "--out", str(out)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert printed.startswith("## Replay of azure-code") and "| 1.5x |" in printed
    data = json.loads((out / "results.json").read_text())
    assert data["policies"] == ["default", "told", "default+unconditioned+no_prefill"]
    engine = data["engines"]["paper"]
    assert engine["sla_s"] == pytest.approx(1.5 * engine["alone_p90_s"])
    windows = rows_by_window(data["rows"])
    assert len(windows) == 2 * 2  # 2 loads x 2 windows
    names = {"vllm", "ceiling", *data["policies"], *(f"static:{b}" for b in (10, 30, 60, 100))}
    for runs in windows.values():
        assert set(runs) == names
        for r in runs.values():
            assert 0 <= r["goodput"] <= 1 and 0 <= r["refused"] <= 1
            assert r["goodput"] <= runs["ceiling"]["goodput"]
    (load,) = [x for x in data["loads"] if x["multiple"] == 1.5]
    assert load["rps"] == pytest.approx(1.5 * engine["capacity_rps"])
    assert (out / "replay.png").stat().st_size > 10_000
    assert "### Every static B" in (out / "results.md").read_text()


def test_replay_cli_on_joint_w1_tells_each_task_on_the_same_windows(capsys):
    args = ["replay", "joint-W1", "--quick", "--rates", "1.5", "--batch-sizes", "30"]
    args += ["--window-size", "50"]
    assert main([*args, "--jobs", "2", "--no-progress", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    told = [f"told:{t}" for t in ("code_generation", "code_qna", "code_summary",
                                  "code_translation")]  # fmt: skip
    assert data["policies"] == ["default", "told", *told, "default+unconditioned+no_prefill"]
    assert data["engines"]["paper"]["sla_s"] is None  # the shipped task types' SLAs
    windows = rows_by_window(data["rows"])
    # 1,024 requests generated (a burst's worth, to measure the capacity): spread over.
    assert [k[2:] for k in windows] == [(1, 487), (2, 974)]
    for runs in windows.values():
        assert set(runs) == {"vllm", "ceiling", "static:30", *data["policies"]}
        assert all(r["goodput"] <= runs["ceiling"]["goodput"] for r in runs.values())


def test_a_bad_trace_line_exits_2_with_its_file_and_number(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,10,x\n")
    assert main(["replay", str(path), "--quick", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: GeneratedTokens must be a whole number" in err and "Traceback" not in err
    assert main(["replay", "no-such-case", "--no-progress"]) == 2
    assert "neither a trace file nor a case (azure-code, joint-W1" in capsys.readouterr().err
    assert main(["replay", "W1", "--variants", "default+nope,usl+mean", "--no-progress"]) == 2
    assert "unknown variant(s) default+nope:" in capsys.readouterr().err


MIXED = [
    {"arrival": 0.0, "prompt_tokens": 100, "output_tokens": 20, "task": "code_qna"},
    {"arrival": 0.5, "prompt_tokens": 900, "output_tokens": 40},
    {"arrival": 2.0, "prompt_tokens": 100, "output_tokens": 30, "task": "code_qna"},
    {"arrival": 9.0, "prompt_tokens": 80, "output_tokens": 20, "task": "code_qna",
     "e2e_s": 0.001},  # no engine answers in a millisecond
    {"arrival": 9.5, "prompt_tokens": 60, "output_tokens": 25, "task": "code_qna",
     "e2e_s": 0.001},
    {"arrival": 12.0, "prompt_tokens": 700, "output_tokens": 50, "prompt": "x" * 2000},
]  # fmt: skip


def replay_mixed(tmp_path, capsys, *extra: str) -> tuple[dict, dict]:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in MIXED))
    args = ["replay", str(path), "--presets", "paper", "--windows", "1", "--window-size", "3"]
    args += ["--rate-of", "trace", "--rates", "1", "--batch-sizes", "10", "--variants", ""]
    assert main([*args, *extra, "--jobs", "1", "--no-progress", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ((key, runs),) = rows_by_window(data["rows"]).items()
    assert key[2:] == (1, 3) and runs["vllm"]["rps"] == pytest.approx(5 / 12.0)
    return data, runs


def test_a_jsonl_trace_mixes_named_and_unnamed_tasks_and_keeps_each_requests_slo(tmp_path, capsys):
    data, runs = replay_mixed(tmp_path, capsys)
    assert data["policies"] == ["default", "told", "told:code_qna", f"told:{UNNAMED_TASK}"]
    assert data["trace"]["tasks"][UNNAMED_TASK]["max_tokens"] == 64
    # The two requests with their own 1 ms SLO are missed even alone; the third, the
    # unnamed task's at 1.5 x its own time alone, is met.
    assert runs["ceiling"]["goodput"] == pytest.approx(1 / 3)
    assert max(r["goodput"] for r in runs.values()) == pytest.approx(1 / 3)


def test_goodput_replaces_every_tasks_slo_and_keeps_each_requests_own(tmp_path, capsys):
    # 10 microseconds to the first token: nothing meets it, not even alone.
    data, runs = replay_mixed(tmp_path, capsys, "--goodput", "ttft:0.01")
    assert data["goodput"] == "ttft:0.01"
    slos = data["engines"]["paper"]["slos"]
    assert slos == {t: {"ttft_s": pytest.approx(1e-5)} for t in ("code_qna", UNNAMED_TASK)}
    assert max(r["goodput"] for r in runs.values()) == 0.0
    # Five times each part's own 90th percentile alone: every request met alone but the
    # two that state their own 1 ms end to end.
    data, runs = replay_mixed(tmp_path, capsys, "--goodput", "ttft:5x tpot:5x")
    for slo in data["engines"]["paper"]["slos"].values():
        assert set(slo) == {"ttft_s", "tpot_s"} and slo["tpot_s"] > 0
    assert runs["ceiling"]["goodput"] == pytest.approx(1 / 3)


def test_a_window_whose_requests_arrive_at_once_has_no_rate(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival": 0, "prompt_tokens": 5, "output_tokens": 3}\n' * 4)
    assert main(["replay", str(path), "--windows", "1", "--window-size", "2"]) == 2
    assert "window 0 (from request 0): a rate needs" in capsys.readouterr().err
