"""parse_load reads each engine's own series from real-format expositions."""

from __future__ import annotations

import pytest
from expositions import LLAMACPP, VLLM

from saber.backend import LOAD_METRICS, BackendKind, BackendLoad, parse_load


def test_vllm_sums_every_label_set() -> None:
    assert parse_load(VLLM, BackendKind.VLLM) == BackendLoad(running=5.0, waiting=4.0)


def test_sim_reads_vllms_names() -> None:
    assert LOAD_METRICS[BackendKind.SIM] == LOAD_METRICS[BackendKind.VLLM]
    assert parse_load(VLLM, BackendKind.SIM) == BackendLoad(running=5.0, waiting=4.0)


def test_llamacpp_processing_and_deferred() -> None:
    assert parse_load(LLAMACPP, BackendKind.LLAMACPP) == BackendLoad(running=32.0, waiting=5.0)


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
