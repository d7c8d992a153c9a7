"""SLOs suggested by saber-profile (``--suggest-slos``) put to use, on any engine: a task
mix to profile, a gateway configuration whose task types take the suggestions, requests
of those task types through the ``openai`` SDK, and the gateway's count of them by part
(``saber_slo_requests_total``)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import yaml
from openai import OpenAI

from harness._metrics import metric_value
from harness._serve import wait_for
from saber.config import DEFAULT_GATEWAY_CONFIG, PARTS

SERVED_AS = {"code_qna": "chat", "code_completion": "autocomplete"}
"""The two task types profiled, and the shipped alias a client names each by: a chat
panel's answers and an editor's completions."""
OUTPUT_TOKENS = {"code_qna": (48, 64), "code_completion": (8, 16)}


def two_task_dataset(path: Path, n: int = 200, seed: int = 0) -> Path:
    """saber-profile's JSONL dataset: code_qna and code_completion by turns, short prompts,
    each its own range of forced output lengths."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        task = list(SERVED_AS)[i % len(SERVED_AS)]
        low, high = OUTPUT_TOKENS[task]
        record = {
            "task": task,
            "prompt_tokens": int(rng.integers(16, 33)),
            "output_tokens": int(rng.integers(low, high + 1)),
        }
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


def read_suggestions(path: Path) -> dict[str, dict[str, float]]:
    """The ``tasks:`` of a ``--suggest-slos`` file: task -> {part_s: limit}."""
    tasks = yaml.safe_load(path.read_text())["tasks"]
    return {str(t): {str(k): float(v) for k, v in parts.items()} for t, parts in tasks.items()}


def config_with_slos(suggested: dict[str, dict[str, float]], dest: Path) -> Path:
    """The shipped gateway configuration, each suggested task's SLO replaced by its
    suggestion (as docs/gateway.md tells an operator: the parts in place of sla_s and
    sla_kind; useful_s raised to the e2e limit where it was below it)."""
    config = yaml.safe_load(DEFAULT_GATEWAY_CONFIG.read_text())
    for task, parts in suggested.items():
        entry = config["tasks"][task]
        for old in ("sla_s", "sla_kind", "ttft_s", "tpot_s", "e2e_s"):
            entry.pop(old, None)
        entry.update(parts)
        if "e2e_s" in parts and entry.get("useful_s") is not None:
            entry["useful_s"] = max(entry["useful_s"], parts["e2e_s"])
    dest.write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def serve_each_task(gateway_url: str, n: int, timeout_s: float = 120.0) -> None:
    """``n`` streamed answers of each task type, one at a time, through the ``openai`` SDK
    (the chat alias for code_qna, a short completion for code_completion)."""
    client = OpenAI(base_url=gateway_url + "/v1", api_key="unused", max_retries=0,
                    timeout=timeout_s)  # fmt: skip
    for i in range(n):
        chat = client.chat.completions.create(
            model=SERVED_AS["code_qna"],
            messages=[{"role": "user", "content": f"Explain the code, part {i}"}],
            max_tokens=OUTPUT_TOKENS["code_qna"][0],
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        assert any(c.choices and c.choices[0].delta.content for c in list(chat))
        completion = client.completions.create(
            model=SERVED_AS["code_completion"],
            prompt=f"def add_{i}(a, b):\n    return",
            max_tokens=OUTPUT_TOKENS["code_completion"][0],
            stream=True,
            extra_body={"ignore_eos": True},
        )
        assert any(c.choices and c.choices[0].text for c in list(completion))


def slo_counts(gateway_url: str, task: str) -> dict[str, dict[str, float]]:
    """``saber_slo_requests_total`` of ``task``: part -> {"true": met, "false": missed}."""
    text = httpx.get(gateway_url + "/metrics", timeout=15).raise_for_status().text
    return {
        part: {
            met: metric_value(text, "saber_slo_requests_total", task=task, part=part, met=met)
            for met in ("true", "false")
        }
        for part in PARTS
    }


def counted_by_part(
    gateway_url: str, suggested: dict[str, dict[str, float]], n: int, timeout_s: float = 10.0
) -> dict[str, dict[str, dict[str, float]]]:
    """Wait until the gateway has counted ``n`` requests of each suggested task (a request
    is counted as it is finalized, a moment after its client has read the end); then each
    task's counts by part. AssertionError past ``timeout_s``."""

    def read() -> dict[str, dict[str, dict[str, float]]]:
        return {task: slo_counts(gateway_url, task) for task in suggested}

    def done(counts: dict[str, dict[str, dict[str, float]]]) -> bool:
        return all(
            sum(counts[task][part[: -len("_s")]].values()) >= n
            for task, parts in suggested.items()
            for part in parts
        )

    return wait_for(read, done, timeout=timeout_s, describe=f"{n} requests counted by part")


def assert_counted_by_part(counts: dict[str, dict[str, dict[str, float]]], n: int) -> None:
    """Each of ``n`` requests of every task counted once under every part suggested (ttft,
    tpot, e2e) and under no other; all but one met (one at a time, far below the load the
    limits were read at; a stalled machine may cost one)."""
    for task, parts in counts.items():
        assert {part: sum(c.values()) for part, c in parts.items()} == {
            "ttft": n, "tpot": n, "e2e": n
        }, task  # fmt: skip
        assert all(c["true"] >= n - 1 for c in parts.values()), (task, parts)
