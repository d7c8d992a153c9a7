"""Which scheduling policy an engine runs: vLLM's ``--scheduling-policy``.

vLLM's OpenAI API does not say. Its ``GET /server_info?config_format=json`` does,
but vLLM serves that route only when started with ``VLLM_SERVER_DEV_MODE=1``
(``vllm/entrypoints/launchers/api_server/routers.py``, 0.32): the whole engine
config dumped by pydantic, the policy at ``vllm_config.scheduler_config.policy``
(``SchedulerConfig.policy`` in ``vllm/config/scheduler.py``). saber-sim answers the
same way. A request's ``priority`` cannot tell instead: vLLM 0.32 accepts and
ignores it under ``fcfs``.

The first call on a vLLM also collects its system report (``collect_env``, some
seconds), hence a timeout of its own.
"""

from __future__ import annotations

from typing import Any, Literal

import httpx

from saber.backend._http import get, json_body

SchedulingPolicy = Literal["fcfs", "priority"]
SERVER_INFO = "/server_info?config_format=json"
POLICY_PATH = ("vllm_config", "scheduler_config", "policy")
"""Where the policy sits in ``/server_info``'s JSON (vLLM's pydantic dump)."""


async def scheduling_policy(
    client: httpx.AsyncClient, base_url: str, timeout_s: float | None = None
) -> SchedulingPolicy | None:
    """``fcfs`` or ``priority`` as the engine at ``base_url`` says; None when it does not
    say (no ``/server_info``: vLLM without dev mode, llama-server; or an answer without
    the policy). BackendError if it cannot be reached or does not answer in time."""
    url = base_url.rstrip("/") + SERVER_INFO
    return policy_of(json_body(await get(client, url, timeout_s)))


def policy_of(info: Any) -> SchedulingPolicy | None:
    """The policy in a ``/server_info`` JSON body, None if it is not there."""
    for key in POLICY_PATH:
        info = info.get(key) if isinstance(info, dict) else None
    if info == "fcfs":
        return "fcfs"
    return "priority" if info == "priority" else None
