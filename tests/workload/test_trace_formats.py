from __future__ import annotations

import json

import pytest

from saber.config import load_tasks, load_workloads
from saber.workload import (
    AZURE_CODE_TRACE,
    NO_CAP,
    UNNAMED_TASK,
    TraceFormatError,
    generate_trace,
    load_trace,
    trace_format,
    write_trace,
)

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_written_trace_loads_back_as_it_was(tmp_path):
    tasks = load_tasks()
    trace = generate_trace(load_workloads(tasks=tasks)["W1"], tasks, rps=3, n=50, seed=4)
    write_trace(tmp_path / "t.jsonl", trace)
    assert load_trace(tmp_path / "t.jsonl") == trace


def test_jsonl_with_its_optional_fields(tmp_path):
    lines = [
        {"arrival": 2.5, "prompt_tokens": 10, "output_tokens": 4, "prompt": "héllo",
         "fingerprint": "sys-a", "e2e_s": 3.0, "ttft_s": 0.5, "tpot_s": 0.05},
        {"id": "x", "task": "code_qna", "arrival": 1.0, "prompt_tokens": 7,
         "output_tokens": 9, "max_tokens": 256, "prompt_bytes": 40},
        {"arrival": 1.0, "prompt_tokens": 0, "output_tokens": 0},
    ]  # fmt: skip
    path = write(tmp_path, "t.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    first, tie, text = load_trace(path)
    # By arrival; the tie at 1.0 keeps the file's order.
    assert (first.id, tie.id, text.id) == ("x", "line3", "line1")
    assert (first.task, first.max_tokens, first.prompt_bytes) == ("code_qna", 256, 40)
    assert first.size_in_bytes == 40 and first.fingerprint is None
    # Neither task nor cap stated; a count of 0 is read as 1.
    assert (tie.task, tie.max_tokens, tie.prompt_tokens, tie.output_tokens) == (
        UNNAMED_TASK, NO_CAP, 1, 1,
    )  # fmt: skip
    assert text.prompt_bytes == len("héllo".encode()) == 6 and text.fingerprint == "sys-a"
    assert (text.e2e_s, text.ttft_s, text.tpot_s) == (3.0, 0.5, 0.05)


def test_azure_csv_timestamps_to_the_seventh_digit_sorted_by_arrival(tmp_path):
    path = write(
        tmp_path,
        "trace.csv",
        AZURE_HEADER + "2023-11-16 23:59:59.9999999,100,5\n"
        "2023-11-16 23:59:59.5,7,1\n"
        "2023-11-17 00:00:00.0000001,3000,0\n",
    )
    early, late, next_day = load_trace(path)
    assert [r.id for r in (early, late, next_day)] == ["line3", "line2", "line4"]
    assert early.arrival == 0.0
    assert late.arrival == pytest.approx(0.4999999, abs=1e-9)
    assert next_day.arrival == pytest.approx(0.5000001, abs=1e-9)
    assert (late.prompt_tokens, late.output_tokens, late.task) == (100, 5, UNNAMED_TASK)
    assert next_day.output_tokens == 1 and late.max_tokens == NO_CAP


def test_the_azure_code_trace_in_the_repository():
    trace = load_trace(AZURE_CODE_TRACE)
    assert len(trace) == 8819 and trace[0].arrival == 0.0
    assert trace[-1].arrival == pytest.approx(3435.948056, abs=1e-6)
    assert (len(trace) - 1) / trace[-1].arrival == pytest.approx(2.57, abs=0.005)
    assert max(r.output_tokens for r in trace) == 1899


def test_the_format_is_picked_by_extension_else_by_the_first_line(tmp_path):
    assert trace_format(AZURE_CODE_TRACE) == "azure"
    assert trace_format(write(tmp_path, "a.log", "\n" + AZURE_HEADER)) == "azure"
    assert trace_format(write(tmp_path, "b", '{"arrival": 0}\n')) == "jsonl"
    with pytest.raises(TraceFormatError, match=r"c\.txt:1: neither a JSONL trace"):
        trace_format(write(tmp_path, "c.txt", "hello\n"))


GOOD = '{"arrival": 0, "prompt_tokens": 5, "output_tokens": 3}'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("oops", "not JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"arrival": 1, "prompt_tokens": 5}', "missing field(s) output_tokens"),
        ('{"arrival": 1, "prompt_tokens": 5, "output_tokens": 2, "colour": 1}',
         "unknown field(s) colour"),
        ('{"arrival": "soon", "prompt_tokens": 5, "output_tokens": 2}',
         "arrival must be a number"),
        ('{"arrival": 1, "prompt_tokens": 5.5, "output_tokens": 2}',
         "prompt_tokens must be a whole number, got 5.5"),
        ('{"arrival": 1, "prompt_tokens": 5, "output_tokens": -2}',
         "output_tokens must be >= 0, got -2"),
        ('{"arrival": 1, "prompt_tokens": 5, "output_tokens": 20, "max_tokens": 16}',
         "max_tokens (16) is below output_tokens (20)"),
        ('{"arrival": 1, "prompt_tokens": 5, "output_tokens": 2, "e2e_s": 0}',
         "e2e_s must be > 0"),
        ('{"arrival": 1, "prompt_tokens": 5, "output_tokens": 2, "prompt": "a", '
         '"prompt_bytes": 1}', "give prompt or prompt_bytes, not both"),
        ('{"arrival": 1, "prompt_tokens": 5, "output_tokens": 2, "task": "Code QnA"}',
         "is not a task type's name"),
        ('{"id": "line1", "arrival": 1, "prompt_tokens": 5, "output_tokens": 2}',
         "id 'line1' is also line 1's"),
    ],
)  # fmt: skip
def test_a_bad_jsonl_line_fails_with_its_file_and_number(tmp_path, body, message):
    path = write(tmp_path, "bad.jsonl", GOOD + "\n\n" + body + "\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path}:3: ") and message in str(info.value)
    assert (info.value.line, info.value.path) == (3, str(path))


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("TIMESTAMP,ContextTokens\n", 1, "the header lacks column(s) GeneratedTokens"),
        (AZURE_HEADER + "2023-11-16 18:17:03.97,10\n", 2, "2 fields, the header has 3"),
        (AZURE_HEADER + "2023-11-16 18:17:03.97,10,1\n2023-11-16 18:17:04,ten,2\n", 3,
         "ContextTokens must be a whole number, got 'ten'"),
        (AZURE_HEADER + "2023-11-16 18:17:03,10,-3\n", 2, "GeneratedTokens must be >= 0, got -3"),
        (AZURE_HEADER + "16/11/2023 18:17:03,10,3\n", 2, "is not YYYY-MM-DD HH:MM:SS"),
        (AZURE_HEADER + "2023-02-30 18:17:03,10,3\n", 2, "day is out of range"),
    ],
)  # fmt: skip
def test_a_bad_azure_line_fails_with_its_number(tmp_path, text, line, message):
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path}:{line}: ") and message in str(info.value)


def test_a_trace_without_requests_is_an_error(tmp_path):
    with pytest.raises(TraceFormatError, match="no requests"):
        load_trace(write(tmp_path, "empty.csv", AZURE_HEADER))
    with pytest.raises(TraceFormatError, match="cannot read it"):
        load_trace(tmp_path / "missing.jsonl")
