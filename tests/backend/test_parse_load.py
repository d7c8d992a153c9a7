"""parse_load reads each engine's own series from real-format expositions."""

from __future__ import annotations

import pytest
from expositions import LLAMACPP, VLLM

from saber.backend import LOAD_METRICS, BackendKind, BackendLoad, parse_load

VLLM_LOAD = BackendLoad(running=5.0, waiting=4.0, ttft_sum=2.71828, ttft_count=32.0)


def test_vllm_sums_every_label_set() -> None:
    assert parse_load(VLLM, BackendKind.VLLM) == VLLM_LOAD


def test_sim_reads_vllms_names() -> None:
    assert LOAD_METRICS[BackendKind.SIM] == LOAD_METRICS[BackendKind.VLLM]
    assert parse_load(VLLM, BackendKind.SIM) == VLLM_LOAD


def test_llamacpp_processing_and_deferred() -> None:
    # llama-server keeps no histogram of time to first token.
    assert parse_load(LLAMACPP, BackendKind.LLAMACPP) == BackendLoad(running=32.0, waiting=5.0)


def test_the_time_to_first_token_histogram_sums_every_engine() -> None:
    second = (
        'vllm:time_to_first_token_seconds_count{engine="1",model_name="tiny-llama"} 8.0\n'
        'vllm:time_to_first_token_seconds_sum{engine="1",model_name="tiny-llama"} 1.28172\n'
    )
    load = parse_load(VLLM + second, BackendKind.VLLM)
    assert (load.ttft_sum, load.ttft_count) == (pytest.approx(4.0), 40.0)


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-1.0"])
def test_a_vllm_without_a_sound_histogram_still_gives_its_load(value: str) -> None:
    bare = "\n".join(line for line in VLLM.splitlines() if "time_to_first_token" not in line)
    assert parse_load(bare, BackendKind.VLLM) == BackendLoad(running=5.0, waiting=4.0)
    odd = VLLM.replace('_sum{engine="0",model_name="tiny-llama"} 2.71828', f"_sum {value}")
    assert odd != VLLM
    assert parse_load(odd, BackendKind.VLLM) == BackendLoad(running=5.0, waiting=4.0)


def test_the_wait_between_two_reads_is_the_mean_of_the_first_tokens_made_between() -> None:
    before = VLLM_LOAD
    after = BackendLoad(5.0, 4.0, ttft_sum=2.71828 + 3.0, ttft_count=36.0)
    assert after.ttft_since(before) == pytest.approx(0.75)  # 4 first tokens, 3 s in all
    assert before.ttft_since(before) is None  # none made between
    assert after.ttft_since(None) is None  # no read before
    assert before.ttft_since(after) is None  # counters back: the engine restarted
    assert BackendLoad(5.0, 4.0).ttft_since(before) is None  # the histogram is gone
    assert after.ttft_since(BackendLoad(5.0, 4.0)) is None


def test_one_engines_names_are_absent_from_the_others_text() -> None:
    with pytest.raises(ValueError, match="vllm:num_requests_running"):
        parse_load(LLAMACPP, BackendKind.VLLM)
    with pytest.raises(ValueError, match="llamacpp:requests_processing"):
        parse_load(VLLM, BackendKind.LLAMACPP)


def test_one_series_missing_is_an_error() -> None:
    text = "\n".join(line for line in VLLM.splitlines() if "num_requests_waiting" not in line)
    with pytest.raises(ValueError, match="vllm:num_requests_waiting") as err:
        parse_load(text, BackendKind.VLLM)
    assert "running" not in str(err.value)


def test_zero_is_a_value_not_an_absence() -> None:
    text = LLAMACPP.replace("requests_processing 32", "requests_processing 0").replace(
        "requests_deferred 5", "requests_deferred 0"
    )
    assert parse_load(text, BackendKind.LLAMACPP) == BackendLoad(0.0, 0.0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "<html><body>404 Not Found</body></html>",
        '{"error": {"code": 501, "message": "This server does not support metrics endpoint."}}',
        "vllm:num_requests_running{engine=0} three\nvllm:num_requests_waiting 1\n",
        "vllm:num_requests_running NaN\nvllm:num_requests_waiting 0\n",
        "vllm:num_requests_running +Inf\nvllm:num_requests_waiting 0\n",
    ],
)
def test_bad_text_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_load(text, BackendKind.VLLM)


def test_a_similar_name_does_not_count() -> None:
    text = VLLM + (
        "# TYPE vllm:num_requests_running_by_priority gauge\n"
        'vllm:num_requests_running_by_priority{priority="0"} 100.0\n'
    )
    assert parse_load(text, BackendKind.VLLM).running == 5.0
