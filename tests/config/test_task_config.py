from __future__ import annotations

from pathlib import Path

import pytest

from saber.config import DEFAULT_CONFIG_DIR, ConfigError, load_tasks, load_workloads

TABLE_I = {
    "code_qna": (186, 43, 1.0),
    "code_generation": (463, 387, 8.0),
    "code_summary": (31, 30, 1.0),
    "code_translation": (670, 617, 12.0),
}


def test_shipped_tasks_are_table_one():
    tasks = load_tasks(DEFAULT_CONFIG_DIR / "tasks.yaml")
    assert {
        n: (t.mean_input_tokens, t.mean_output_tokens, t.sla_s) for n, t in tasks.items()
    } == TABLE_I


def test_shipped_workloads_are_the_papers_mixes():
    wl = load_workloads(DEFAULT_CONFIG_DIR / "workloads.yaml", tasks=load_tasks())
    assert set(wl) == {"W1", "W2", "W3"}
    assert wl["W1"].mix["code_translation"] == 0.4
    assert wl["W2"].mix["code_qna"] == 0.4
    assert set(wl["W3"].mix.values()) == {0.25}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        (
            "tasks:\n  a: {mean_input_tokens: 1, mean_output_tokens: 1, sla_s: -1, max_tokens: 8}",
            "sla_s",
            "greater than 0",
        ),
        (
            "tasks:\n  a: {mean_input_tokens: 1, mean_output_tokens: 9, sla_s: 1, max_tokens: 8}",
            "tasks.a",
            "below mean_output_tokens",
        ),
        (
            "tasks:\n  a: {mean_input_tokens: 1, mean_output_tokens: 1, sla_s: 1}",
            "max_tokens",
            "Field required",
        ),
        (
            "tasks:\n  a: {mean_input_tokens: 1, mean_output_tokens: 1, sla_s: 1, "
            "max_tokens: 8, colour: red}",
            "colour",
            "Extra inputs",
        ),
        ("tasks:\n  Bad-Name: {}", "tasks.Bad-Name", "pattern"),
        ("tasks: {}", "tasks", "at least 1"),
        ("tasks: [\n", "not valid YAML", ""),
    ],
)
def test_bad_task_config_names_file_field_and_problem(tmp_path, text, field, problem):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_tasks(path)
    message = str(info.value)
    assert str(path) in message
    assert field in message
    assert problem in message


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read"):
        load_tasks(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("workloads:\n  W: {mix: {code_qna: 0.5}}", "sum to 0.5"),
        ("workloads:\n  W: {mix: {code_qna: 1.5, code_summary: -0.5}}", "greater than or equal"),
        ("workloads:\n  W: {mix: {code_poetry: 1.0}}", "unknown task type(s) code_poetry"),
    ],
)
def test_bad_workload_is_rejected(tmp_path, text, problem):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_workloads(path, tasks=load_tasks())
    assert str(path) in str(info.value) and "workloads.W" in str(info.value)
    assert problem in str(info.value)
