"""Task honesty: a request is scheduled as its task type, so it may not ask for more.

A request's task type sets its deadline, and so its priority, and the scheduler prices
it by that task's lengths; so the task's ``max_tokens`` caps it, however the task was
picked: the ``X-Saber-Task`` header, a model name ``<model>:<task>``, a configured
alias (``chat``), a rule or ``default_task``. The same request gets the same answer
whichever way it names its task. A key's ``max_tokens`` caps every request made with
it. ``task_max_tokens`` says what happens to a request above its cap: ``clamp`` (the
default) lowers the cap it sends to the backend (and sets one where it sent none),
``reject`` refuses it with a 400 naming the field (one without a cap is clamped),
``off`` lets it through as it came.

Whatever the setting, a request that generates more than its task's ``max_tokens``
for each of its sequences (``n`` x prompts) is counted in
``saber_task_overrun_total`` (an engine that ignores the cap, ``off``).
"""

from __future__ import annotations

from typing import Literal

from saber.config import TaskType
from saber.gateway.edge.access import Key
from saber.gateway.edge.fields import CAPS
from saber.gateway.edge.payload import Payload
from saber.gateway.errors import invalid

Mode = Literal["clamp", "reject", "off"]


def cap_for(task: TaskType, key: Key | None, mode: Mode) -> int | None:
    """The most tokens this request may ask for; None: no cap applies."""
    if mode == "off":
        return None
    caps = [task.max_tokens]
    if key is not None and key.max_tokens is not None:
        caps.append(key.max_tokens)
    return min(caps)


def enforce(payload: Payload, task: TaskType, cap: int | None, mode: Mode) -> None:
    """Under ``reject``, a 400 for a request that asks for more than ``cap``."""
    if cap is None or mode != "reject" or payload.max_tokens is None:
        return
    if payload.max_tokens > cap:
        field = next((n for n in CAPS if payload.body.get(n) == payload.max_tokens), "max_tokens")
        raise invalid(
            f"'{field}' is {payload.max_tokens}, above {cap}, the most task type "
            f"{task.name} (or this API key) may ask for",
            param=field,
            code="max_tokens_above_task_cap",
        )


def overran(task: TaskType | None, tokens: int, seqs: int = 1) -> bool:
    """It generated more than its task allows each of its ``seqs`` sequences."""
    return task is not None and tokens > task.max_tokens * seqs
