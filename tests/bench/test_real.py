"""saber-bench real, against saber-sim and a real gateway in front of it; and the rule that
rescales the paper's SLAs for another engine."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from harness import metric_value, wait_for, write_profile
from saber.bench import RealRunError, RunResult, rescale_tasks, run_real, short_sla_tasks
from saber.bench.cli import main
from saber.bench.real._run import Served
from saber.config import load_gateway_config, load_tasks, load_workloads
from saber.gateway import RunningGateway, settings_from_config, start_in_thread
from saber.sim.http import RunningSim, serve_in_thread
from saber.speed import USLModel
from saber.workload import generate_trace

PAPER = USLModel(lam=130.0, sigma=0.048, kappa=0.00015)  # flat: a GPU batches well
CPU = USLModel(lam=300.0, sigma=1.0, kappa=0.002)  # steep: a CPU does not


def test_rescaled_slas_bind_at_the_same_load() -> None:
    paper = load_tasks()
    tasks = rescale_tasks(paper, input_scale=0.1, output_scale=0.5, reference=PAPER, target=CPU)
    for name, task in tasks.items():
        needed = paper[name].mean_output_tokens / paper[name].sla_s
        # The highest load at which the paper's engine still meets the SLA ...
        load = max(n for n in range(1, 1025) if PAPER.predict(float(n)) >= needed)
        assert PAPER.predict(load + 1.0) < needed
        # ... is where the CPU engine just meets the rescaled one.
        assert task.sla_s == pytest.approx(task.mean_output_tokens / CPU.predict(float(load)))
        assert task.mean_output_tokens == round(paper[name].mean_output_tokens * 0.5)
        assert task.mean_input_tokens == round(paper[name].mean_input_tokens * 0.1)
        assert task.max_tokens == round(paper[name].max_tokens * 0.5)
    # The tightest SLAs stay the short tasks'.
    tightest = min(tasks.values(), key=lambda t: t.sla_s)
    assert tightest.name in {"code_qna", "code_summary"}


def test_rescaled_slas_stop_at_the_profiled_load() -> None:
    capped = rescale_tasks(
        load_tasks(), input_scale=1, output_scale=1, reference=PAPER, target=CPU, max_load=8
    )
    for task in capped.values():
        assert task.sla_s == pytest.approx(task.mean_output_tokens / CPU.predict(8.0))
    kept = rescale_tasks(load_tasks(), input_scale=1, output_scale=1)
    assert {n: t.sla_s for n, t in kept.items()} == {n: t.sla_s for n, t in load_tasks().items()}


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    with serve_in_thread(time_scale=20.0, max_num_seqs=256) as running:
        yield running


@pytest.fixture(scope="module")
def gateway(sim: RunningSim, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    profile = write_profile(tmp_path_factory.mktemp("real") / "profile.json")
    cfg = load_gateway_config(
        env={},
        overrides={"backend.url": sim.url, "profile": str(profile), "log_requests": False},
    )
    gw = start_in_thread(settings_from_config(cfg))
    yield gw
    gw.stop()


def test_real_replays_one_stream_both_ways(
    sim: RunningSim, gateway: RunningGateway, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "real.json"
    code = main(
        [
            "real", "--engine", sim.url, "--gateway", gateway.url, "--model", sim.model,
            "--requests", "24", "--rps", "40", "--seed", "3", "--format", "json",
            "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert [s["run"] for s in printed] == ["direct", "gateway"]
    for summary in printed:
        assert summary["requests"] == 24 and summary["errors"] == 0
        assert summary["samples"] >= 1  # saber-sim's vllm:* load was read during the run
        assert 0.0 <= summary["short_sla_goodput"] <= 1.0
    doc = json.loads(out.read_text())
    assert doc["short_sla_tasks"] == ["code_qna", "code_summary"]
    runs = {run["name"]: run["served"] for run in doc["runs"]}
    assert [s["id"] for s in runs["direct"]] == [s["id"] for s in runs["gateway"]]
    assert all(s["completion_tokens"] > 0 for s in runs["direct"] + runs["gateway"])
    # Only the gateway run went through the gateway, each request as its own task type.
    per_task = Counter(s["task"] for s in runs["gateway"])

    def counted() -> dict[str, float]:
        text = httpx.get(gateway.url + "/metrics").text
        return {task: metric_value(text, "saber_requests_total", task=task) for task in per_task}

    wait_for(counted, lambda seen: seen == per_task, describe=f"the gateway's counts {per_task}")


def test_run_real_is_the_library_call(sim: RunningSim, gateway: RunningGateway) -> None:
    lines: list[str] = []
    shipped = load_gateway_config(env={}).tasks  # the gateway's own task types
    result = run_real(
        sim.url, gateway.url, sim.model, shipped, requests=8, rps=40, seed=1, say=lines.append
    )
    assert [run.name for run in result.runs] == ["direct", "gateway"]
    assert lines == [f"{run}: 8 requests at 40/s (sim engine)" for run in ("direct", "gateway")]
    assert result.summary("gateway")["requests"] == 8
    assert [len(run["served"]) for run in result.to_dict()["runs"]] == [8, 8]
    with pytest.raises(RealRunError, match="unknown workload 'W9'"):
        run_real(sim.url, gateway.url, sim.model, shipped, workload="W9")


def test_real_refuses_slas_the_gateway_does_not_have(
    sim: RunningSim, gateway: RunningGateway, tmp_path: Path
) -> None:
    tasks = yaml.safe_load(Path("configs/tasks.yaml").read_text())
    tasks["tasks"]["code_qna"]["sla_s"] = 5.0
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump(tasks))
    with pytest.raises(SystemExit, match=r"disagree on SLAs.*code_qna"):
        main(
            [
                "real", "--engine", sim.url, "--gateway", gateway.url, "--model", sim.model,
                "--tasks", str(path), "--requests", "8",
            ]
        )  # fmt: skip


def test_real_says_when_nothing_listens(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="cannot reach the engine or the gateway"):
        main(
            [
                "real", "--engine", "http://127.0.0.1:9", "--gateway", "http://127.0.0.1:9",
                "--model", "m", "--requests", "8",
            ]
        )  # fmt: skip


def test_short_sla_tasks_are_those_below_the_widest_gap() -> None:
    paper = load_tasks()
    trace = generate_trace(load_workloads(tasks=paper)["W3"], paper, rps=1.0, n=40, seed=0)
    assert short_sla_tasks(trace, paper) == {"code_qna", "code_summary"}
    # Rescaled for a steep CPU curve the two short SLAs differ; they are still the short ones.
    cpu = rescale_tasks(paper, input_scale=0.1, output_scale=0.5, reference=PAPER, target=CPU)
    assert cpu["code_qna"].sla_s != cpu["code_summary"].sla_s
    assert short_sla_tasks(trace, cpu) == {"code_qna", "code_summary"}


def test_a_request_that_errored_counts_as_an_error_and_a_missed_sla() -> None:
    # What the real loop's bare-engine run reports when a client timeout cuts a request
    # off: it is not dropped from the goodput, it is a miss.
    run = RunResult(
        "direct",
        [
            Served("0", "code_qna", 1.0, 0.5, 10),
            Served("1", "code_qna", 1.0, None, 0, "TimeoutError: "),
            Served("2", "code_generation", 8.0, 9.0, 10),
            Served("3", "code_generation", 8.0, 2.0, 10),
        ],
    )
    summary = run.summary({"code_qna"})
    assert summary["errors"] == 1
    assert summary["short_sla_goodput"] == 0.5
    assert summary["goodput"] == 0.5
    assert summary["goodput_per_task"] == {"code_generation": 0.5, "code_qna": 0.5}
