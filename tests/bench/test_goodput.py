"""Goodput as vLLM's serving benchmark counts it: every stated part met, TPOT by its rule."""

from __future__ import annotations

import pytest

from saber.bench._goodput import goodput_tasks, parse_goodput, with_goodput
from saber.bench._grid import shipped_tasks
from saber.bench._offline import engine_profile
from saber.bench._runner import serve_saber, serve_static
from saber.config import load_workloads
from saber.engine import get_preset
from saber.scheduler import Policy
from saber.workload import generate_trace


def vllm_goodput(records, ttft_ms=None, tpot_ms=None, e2el_ms=None) -> float:
    """benchmark_serving's rule, written out from its source, not from ours."""
    good = 0
    for r in records:
        if r.finished_at is None:
            continue  # a failed request is never good
        latency = r.finished_at - r.arrival
        ttft = r.first_token_at - r.arrival
        tpot = (latency - ttft) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0
        checks = []
        if ttft_ms is not None:
            checks.append(ttft <= ttft_ms / 1000)
        if tpot_ms is not None:
            checks.append(tpot <= tpot_ms / 1000)
        if e2el_ms is not None:
            checks.append(latency <= e2el_ms / 1000)
        good += all(checks)
    return good / len(records)


def test_the_goodput_option_parses_vllm_s_form_and_scales():
    g = parse_goodput(["ttft:500", "tpot:40", "e2el:8000"])
    assert g.slo().model_dump() == {"ttft_s": 0.5, "tpot_s": 0.04, "e2e_s": 8.0}
    scaled = parse_goodput(["ttft:3x", "tpot:2x"])
    assert scaled.scaled and scaled.slo({"ttft": 0.1, "tpot": 0.01, "e2e": 5.0}).model_dump() == {
        "ttft_s": pytest.approx(0.3), "tpot_s": pytest.approx(0.02), "e2e_s": None,
    }  # fmt: skip
    for bad in (["ttft"], ["ttft:abc"], ["e2e:100"], ["ttft:-5"], ["ttft:1", "ttft:2"], []):
        with pytest.raises(ValueError):
            parse_goodput(bad)


@pytest.mark.parametrize(
    ("ttft", "tpot", "e2el"), [(400, 30, None), (None, 25, 9000), (250, None, None)]
)
def test_goodput_is_counted_as_vllm_counts_it(ttft, tpot, e2el):
    tasks = shipped_tasks()
    workloads = load_workloads(tasks=tasks)
    spec = [f"{n}:{v}" for n, v in (("ttft", ttft), ("tpot", tpot), ("e2el", e2el)) if v]
    with_slo = with_goodput(tasks, parse_goodput(spec))
    preset = get_preset("paper")
    trace = generate_trace(workloads["W3"], with_slo, rps=8.0, n=120, seed=5)
    speed, fit = engine_profile(preset, workloads["W3"], tasks, points=300)
    for result in (
        serve_static(trace, preset, 256, with_slo),
        serve_saber(
            trace, preset, with_slo, speed, Policy.named("closed-loop", max_concurrency=256),
            max_num_seqs=256, ttft=fit.predict, prefill=fit.prefill,
        ),
    ):  # fmt: skip
        expected = vllm_goodput(result.records, ttft, tpot, e2el)
        assert result.goodput() == pytest.approx(expected)
        assert 0.0 < expected < 1.0  # the limits bite, and some requests meet them


def test_scales_read_the_engine_s_own_times():
    tasks = shipped_tasks()
    workloads = load_workloads(tasks=tasks)
    fast, slow = get_preset("h100-qwen2.5-coder-7b"), get_preset("a10-qwen2.5-coder-7b")
    g = parse_goodput(["ttft:2x", "tpot:2x"])
    on_fast = goodput_tasks(tasks, g, fast, workloads["W3"])
    on_slow = goodput_tasks(tasks, g, slow, workloads["W3"])
    for name in tasks:
        assert on_fast[name].slo.parts == ("ttft", "tpot")
        assert on_fast[name].slo.tpot_s < on_slow[name].slo.tpot_s
        assert on_fast[name].slo.ttft_s < on_slow[name].slo.ttft_s
