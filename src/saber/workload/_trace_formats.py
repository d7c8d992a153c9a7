"""Traces recorded elsewhere, read as ``TraceRequest``s: the project's JSONL trace
(with optional fields) and the Azure LLM inference CSV.

``load_trace`` picks the format by the file's extension (``.jsonl``, ``.json``,
``.ndjson``: JSONL; ``.csv``: Azure), else by its first line (``{``: JSONL; a header
naming ``TIMESTAMP``: Azure). A bad line raises ``TraceFormatError``, which names the
file, the line and what is wrong. Requests may come in any order: they are sorted by
arrival (ties keep the file's order), and arrivals are seconds from the earliest.

JSONL, one request a line (``write_trace`` writes it):

- required: ``arrival`` (seconds), ``prompt_tokens``, ``output_tokens`` (what the
  engine counted: the prompt, and the answer the model really made);
- ``id`` (default ``line<N>``, unique), ``task`` (a task type's name; default
  ``UNNAMED_TASK``), ``max_tokens`` (the cap the client sent, at least the answer;
  default ``NO_CAP``);
- what the gateway sees of the prompt: its text ``prompt`` (its size in UTF-8 bytes is
  kept as ``prompt_bytes``) or ``prompt_bytes``, and a ``fingerprint`` (what it shares
  with other requests: a system prompt, a template);
- its own SLO in parts, in seconds: ``ttft_s``, ``tpot_s``, ``e2e_s``.

Azure (github.com/Azure/AzurePublicDataset): a header with ``TIMESTAMP``,
``ContextTokens`` and ``GeneratedTokens`` (other columns are ignored); timestamps like
``2023-11-16 18:17:03.9799600``, read to the 7th fractional digit. Its requests name
no task and state no cap.

Token counts must be whole numbers, not negative; a count of 0 (a request cut off
before its first token, a prompt the log counted empty) is read as 1, the least an
engine serves.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from saber.workload._trace import TraceRequest

TraceFormat = Literal["jsonl", "azure"]
UNNAMED_TASK = "replay"
"""The task of a request whose trace names none."""
NO_CAP = 0
"""``max_tokens`` of a request whose trace states no cap: whoever replays it sends its
task's (``saber-bench replay`` does)."""
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
AZURE_CODE_TRACE = Path(__file__).with_name("data") / "AzureLLMInferenceTrace_code.csv"
"""One hour of Azure's code service, 2023-11-16 (8,819 requests; data/README.md)."""

_SUFFIXES: dict[str, TraceFormat] = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "azure",
}
_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")
_EPOCH = datetime(1970, 1, 1)
_FIELDS = {
    "id", "task", "arrival", "prompt_tokens", "output_tokens", "max_tokens", "prompt",
    "prompt_bytes", "fingerprint", "ttft_s", "tpot_s", "e2e_s",
}  # fmt: skip
_TASK_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class TraceFormatError(ValueError):
    """A trace file that cannot be read: where (``path``, ``line``; 0 for the whole
    file) and what is wrong."""

    def __init__(self, path: str | Path, line: int, what: str) -> None:
        self.path, self.line, self.what = str(path), line, what
        super().__init__(f"{path}:{line}: {what}" if line else f"{path}: {what}")


def load_trace(path: str | Path) -> list[TraceRequest]:
    """The requests of the trace at ``path``, in the format it is in, by arrival."""
    path = Path(path)
    fmt = trace_format(path)
    requests = list(_read_jsonl(path) if fmt == "jsonl" else _read_azure(path))
    if not requests:
        raise TraceFormatError(path, 0, "no requests")
    requests.sort(key=lambda r: r.arrival)
    return requests


def trace_format(path: str | Path) -> TraceFormat:
    """The format of the trace at ``path``: by its extension, else its first line."""
    path = Path(path)
    if path.suffix.lower() in _SUFFIXES:
        return _SUFFIXES[path.suffix.lower()]
    try:
        with path.open(encoding="utf-8") as fh:
            first = next((line.strip() for line in fh if line.strip()), "")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFormatError(path, 0, f"cannot read it: {exc}") from None
    if first.startswith("{"):
        return "jsonl"
    if "TIMESTAMP" in first.split(","):
        return "azure"
    raise TraceFormatError(
        path, 1, "neither a JSONL trace (a JSON object a line) nor an Azure CSV (a header "
        f"with {', '.join(AZURE_COLUMNS)})",
    )  # fmt: skip


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            yield from enumerate(fh, 1)
    except OSError as exc:
        raise TraceFormatError(path, 0, f"cannot read it: {exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(path, 0, f"not UTF-8 text: {exc}") from None


# -- JSONL ------------------------------------------------------------------------


def _read_jsonl(path: Path) -> Iterator[TraceRequest]:
    ids: dict[str, int] = {}
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(path, lineno, f"not JSON: {exc}") from None
        try:
            req = _request(data, lineno)
        except ValueError as exc:
            raise TraceFormatError(path, lineno, str(exc)) from None
        if req.id in ids:
            raise TraceFormatError(path, lineno, f"id {req.id!r} is also line {ids[req.id]}'s")
        ids[req.id] = lineno
        yield req


def _request(data: Any, lineno: int) -> TraceRequest:
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(_FIELDS)}")
    missing = [k for k in ("arrival", "prompt_tokens", "output_tokens") if k not in data]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    output = _whole(data, "output_tokens")
    cap = NO_CAP if data.get("max_tokens") is None else _whole(data, "max_tokens", least=1)
    if cap != NO_CAP and cap < output:
        raise ValueError(f"max_tokens ({cap}) is below output_tokens ({output})")
    if "prompt" in data and "prompt_bytes" in data:
        raise ValueError("give prompt or prompt_bytes, not both")
    prompt_bytes = None
    if data.get("prompt") is not None:
        prompt_bytes = len(_text(data, "prompt").encode("utf-8"))
    elif data.get("prompt_bytes") is not None:
        prompt_bytes = _whole(data, "prompt_bytes", least=0)
    task = UNNAMED_TASK if data.get("task") is None else _text(data, "task")
    if not _TASK_NAME.match(task):
        raise ValueError(f"task {task!r} is not a task type's name ([a-z][a-z0-9_]*)")
    return TraceRequest(
        id=f"line{lineno}" if data.get("id") is None else _text(data, "id"),
        task=task,
        arrival=_number(data, "arrival", allow_zero=True),
        prompt_tokens=_whole(data, "prompt_tokens"),
        output_tokens=output,
        max_tokens=cap,
        prompt_bytes=prompt_bytes,
        fingerprint=None if data.get("fingerprint") is None else _text(data, "fingerprint"),
        **{k: _number(data, k) for k in ("ttft_s", "tpot_s", "e2e_s") if data.get(k) is not None},
    )


def _whole(data: dict[str, Any], key: str, *, least: int | None = None) -> int:
    """A whole number >= ``least``; without one, a token count (0 read as 1)."""
    value = data[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be a whole number, got {value!r}")
    if value < (0 if least is None else least):
        raise ValueError(f"{key} must be >= {0 if least is None else least}, got {value}")
    return max(value, 1) if least is None else value


def _number(data: dict[str, Any], key: str, *, allow_zero: bool = False) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} must be a number (seconds), got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{key} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return float(value)


def _text(data: dict[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, got {value!r}")
    return value


# -- Azure CSV --------------------------------------------------------------------


def _read_azure(path: Path) -> Iterator[TraceRequest]:
    lines = _lines(path)
    rows = csv.reader(line for _, line in lines)
    header: list[str] | None = None
    at: list[int] = []  # where each of AZURE_COLUMNS is in a row
    parsed: list[tuple[int, int, float, int, int]] = []  # line, whole s, fraction, tokens
    for row in rows:
        lineno = rows.line_num
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [cell.strip() for cell in row]
            missing = [c for c in AZURE_COLUMNS if c not in header]
            if missing:
                raise TraceFormatError(
                    path, lineno, f"the header lacks column(s) {', '.join(missing)}: "
                    f"an Azure trace has {', '.join(AZURE_COLUMNS)}",
                )  # fmt: skip
            at = [header.index(c) for c in AZURE_COLUMNS]
            continue
        if len(row) != len(header):
            raise TraceFormatError(path, lineno, f"{len(row)} fields, the header has {len(header)}")
        try:
            whole, fraction = _timestamp(row[at[0]].strip())
            prompt = _tokens(row[at[1]], AZURE_COLUMNS[1])
            answer = _tokens(row[at[2]], AZURE_COLUMNS[2])
        except ValueError as exc:
            raise TraceFormatError(path, lineno, str(exc)) from None
        parsed.append((lineno, whole, fraction, prompt, answer))
    if header is None:
        raise TraceFormatError(path, 0, "empty: no header")
    if not parsed:
        return
    base = min(whole for _, whole, _, _, _ in parsed)
    first = min((whole - base) + fraction for _, whole, fraction, _, _ in parsed)
    for lineno, whole, fraction, prompt, answer in parsed:
        yield TraceRequest(
            id=f"line{lineno}",
            task=UNNAMED_TASK,
            arrival=(whole - base) + fraction - first,
            prompt_tokens=prompt,
            output_tokens=answer,
            max_tokens=NO_CAP,
        )


def _timestamp(text: str) -> tuple[int, float]:
    """Whole seconds since 1970 and the fraction of the next, kept apart so that the
    7th digit survives (a float of the whole time keeps about 6)."""
    m = _TIMESTAMP.fullmatch(text)
    if m is None:
        raise ValueError(f"TIMESTAMP {text!r} is not YYYY-MM-DD HH:MM:SS[.fraction]")
    try:
        year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
        when = datetime(year, month, day, hour, minute, second)
    except ValueError as exc:
        raise ValueError(f"TIMESTAMP {text!r}: {exc}") from None
    delta = when - _EPOCH
    digits = m.group(7) or "0"
    return delta.days * 86400 + delta.seconds, int(digits) / 10 ** len(digits)


def _tokens(text: str, column: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{column} must be a whole number, got {text.strip()!r}") from None
    if value < 0:
        raise ValueError(f"{column} must be >= 0, got {value}")
    return max(value, 1)
