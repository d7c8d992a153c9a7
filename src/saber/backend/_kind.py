"""What the gateway and the profiler call a backend: which engine, what it answered."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class BackendKind(StrEnum):
    """The OpenAI-compatible engines saber knows how to talk to."""

    VLLM = "vllm"
    LLAMACPP = "llamacpp"
    SIM = "sim"


class BackendError(Exception):
    """The backend was unreachable or answered something unusable.

    The message says what was asked, of which URL, and what came back.
    """


@dataclass(frozen=True)
class BackendInfo:
    """Who serves: the engine, its version (llama.cpp: its build) and its model ids."""

    kind: BackendKind
    version: str | None
    models: list[str] = field(default_factory=list)
