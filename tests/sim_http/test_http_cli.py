"""saber-sim's command line: every flag documented and wired to a setting."""

from __future__ import annotations

import re

import pytest

from saber.sim.http.cli import build_parser, main, settings_from_args
from saber.sim.http.settings import FaultSettings, SimSettings

FLAGS = (
    "--host --port --served-model-name --uvicorn-log-level --disable-uvicorn-access-log "
    "--preset --list-presets --max-num-seqs --max-num-batched-tokens --kv-capacity-tokens "
    "--scheduling-policy --max-model-len --time-scale --output-len --fallback-output-len "
    "--seed --error-rate --stall-prob --stall-after --refuse-for"
).split()


def test_help_explains_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    documented = set(re.findall(r"(--[a-z][a-z-]+)", text))
    assert set(FLAGS) <= documented
    parser = build_parser()
    for action in parser._actions:
        assert action.help, action.option_strings


def test_flags_map_onto_settings() -> None:
    args = build_parser().parse_args(
        "--preset paper --max-num-seqs 8 --max-num-batched-tokens 512 --kv-capacity-tokens "
        "65536 --max-model-len 8192 --time-scale 4 --served-model-name a b --seed 7 "
        "--output-len fixed:9 --error-rate 0.1 --stall-prob 0.2 --stall-after 5 "
        "--refuse-for 1.5 --scheduling-policy priority".split()
    )
    assert settings_from_args(args) == SimSettings(
        preset="paper",
        served_model_name=("a", "b"),
        max_num_seqs=8,
        max_num_batched_tokens=512,
        kv_capacity_tokens=65536,
        scheduling_policy="priority",
        max_model_len=8192,
        time_scale=4.0,
        seed=7,
        output_len="fixed:9",
        faults=FaultSettings(error_rate=0.1, stall_prob=0.2, stall_after=5, refuse_for=1.5),
    )


def test_defaults_match_the_issue() -> None:
    s = settings_from_args(build_parser().parse_args([]))
    assert (s.preset, s.max_num_seqs, s.time_scale) == ("paper", 256, 1.0)
    assert s.scheduling_policy == "fcfs"  # vLLM's default


@pytest.mark.parametrize(
    "argv",
    [["--preset", "no-such-gpu"], ["--time-scale", "0"], ["--output-len", "uniform"],
     ["--error-rate", "2"], ["--scheduling-policy", "lifo"]],
)  # fmt: skip
def test_bad_flags_exit_with_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_list_presets(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--list-presets"])
    assert "paper" in capsys.readouterr().out.split()
