"""Which task type a request belongs to, and which model name goes upstream.

Order: the ``X-Saber-Task`` header; the model name as an alias (``<model>:<task>``
or a configured alias); the configured rules (on the endpoint, the tokens it may
generate, and whether the request is fill-in-the-middle); the default task.

A rule's ``max_tokens_at_most`` weighs the whole request: ``max_tokens`` times its
sequences (``n`` x prompts), so that a list of 50 short prompts, or ``n`` = 16 short
answers, is not taken for one short completion.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from saber.config import GatewayConfig, TaskType
from saber.gateway.edge.fim import is_fim
from saber.gateway.errors import invalid, quote

Via = Literal["header", "alias", "rule", "default"]
Endpoint = Literal["chat", "completions"]
BACKEND_MODEL = object()
"""Stands for "the backend's served model" where an alias names no model."""
TASK_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
"""What a task type's name looks like (``saber.config``'s rule)."""


@dataclass(frozen=True, slots=True)
class Resolution:
    task: TaskType
    via: Via
    model: str | object | None = None
    """The model name to send upstream instead of the client's; None: unchanged;
    BACKEND_MODEL: the backend's own model, which the caller looks up."""


class TaskResolver:
    def __init__(self, config: GatewayConfig) -> None:
        self.tasks = config.tasks
        self.aliases = config.aliases
        self.rules = config.rules
        self.default = config.tasks[config.default_task]

    def task_for_header(self, value: str) -> TaskType:
        name = value.strip().lower().replace("-", "_")
        task = self.tasks.get(name)
        if task is None:
            known = ", ".join(sorted(self.tasks))
            raise invalid(
                f"unknown task type {quote(value)} in X-Saber-Task; known: {known}",
                param="X-Saber-Task",
                code="unknown_task",
            )
        return task

    def alias(self, model: str | None) -> tuple[TaskType, str | object] | None:
        """The task and real model an alias stands for, or None if it is not one."""
        if not model:
            return None
        target = self.aliases.get(model)
        if target is not None:
            real = target.model if target.model is not None else BACKEND_MODEL
            return self.tasks[target.task], real
        base, sep, suffix = model.rpartition(":")
        if sep and base and suffix in self.tasks:
            return self.tasks[suffix], base
        return None

    def check_model_task(self, model: str | None, served: Sequence[str]) -> None:
        """A 400 naming the task when ``model`` is ``<served model>:<name>`` and ``<name>``
        is no task type (the backend would answer that the model does not exist). A model
        the backend serves under that very name, or one with no served model before its
        last ``:``, passes (``served`` empty: the backend is not identified yet)."""
        if not model or model in served or self.alias(model) is not None:
            return
        base, sep, suffix = model.rpartition(":")
        if sep and base in served and TASK_NAME.match(suffix):
            raise invalid(
                f"unknown task type {quote(suffix)} in model {quote(model)}: {base} is "
                f"served, and what follows ':' names a task type; known: "
                f"{', '.join(sorted(self.tasks))}",
                param="model",
                code="unknown_task",
            )

    def resolve(
        self,
        endpoint: Endpoint,
        *,
        header: str | None,
        model: str | None,
        max_tokens: int | None,
        sequences: int = 1,
        body: Mapping[str, Any] | None = None,
    ) -> Resolution:
        """The task and upstream model of a request of ``sequences`` sequences; ``body``
        (the parsed request) is read only by a rule with a ``fim`` condition."""
        alias = self.alias(model)
        rewrite = alias[1] if alias else None
        if header is not None:
            return Resolution(self.task_for_header(header), "header", rewrite)
        if alias is not None:
            return Resolution(alias[0], "alias", rewrite)
        fim: bool | None = None  # looked at once, by the first rule that asks
        for rule in self.rules:
            if rule.endpoint not in ("any", endpoint):
                continue
            if rule.max_tokens_at_most is not None and (
                max_tokens is None or max_tokens * sequences > rule.max_tokens_at_most
            ):
                continue
            if rule.fim is not None:
                if fim is None:
                    fim = body is not None and is_fim(body)
                if rule.fim is not fim:
                    continue
            return Resolution(self.tasks[rule.task], "rule")
        return Resolution(self.default, "default")

    def alias_names(self, backend_models: list[str]) -> list[tuple[str, str]]:
        """(alias, real model) pairs that /v1/models lists next to the backend's own."""
        first = backend_models[0] if backend_models else None
        pairs = [
            (name, target.model or first)
            for name, target in self.aliases.items()
            if (target.model or first) is not None
        ]
        pairs += [(f"{m}:{task}", m) for m in backend_models for task in self.tasks]
        return [(a, m) for a, m in pairs if m is not None]
