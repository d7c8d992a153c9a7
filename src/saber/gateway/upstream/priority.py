"""Whether the admission tier goes to a backend as vLLM's request ``priority``.

``backend.forward_priority`` is ``true``, ``false`` or ``auto``. With ``auto`` the
engine is asked, once it is identified (again after a restart), which scheduling
policy it runs (``saber.backend.scheduling_policy``), and the tier is forwarded only under
``priority``. An engine that does not say (vLLM without ``VLLM_SERVER_DEV_MODE=1``)
gets nothing: under ``fcfs`` the field would be ignored anyway, but the point of
``auto`` is to send it only where it is read. llama.cpp has no request priority and
is never asked. Each decision is logged, and exported
(``saber_backend_forward_priority``, ``/saber/status``).
"""

from __future__ import annotations

import logging
from typing import Literal

import httpx

from saber.backend import BackendError, BackendKind, SchedulingPolicy, scheduling_policy
from saber.config import BackendSettings
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.gateway.upstream.dialect import DIALECTS

log = logging.getLogger(GATEWAY_LOGGER)

PrioritySource = Literal["configured", "detected", "unknown"]

POLICY_TIMEOUT_S = 30.0
"""vLLM's first /server_info collects a system report (pip, GPU tools): seconds."""
UNKNOWN_HINT = (
    "backend.forward_priority: true forwards it anyway (vLLM 0.32 accepts and ignores "
    "it under fcfs)"
)


class EnginePriority:
    """The decision for one backend: ``forward``, and why (``source``, ``policy``)."""

    def __init__(self, settings: BackendSettings) -> None:
        self.setting = settings.forward_priority
        self.forward = self.setting is True  # auto: off until the engine says
        self.source: PrioritySource = "unknown" if self.setting == "auto" else "configured"
        self.policy: SchedulingPolicy | None = None  # as the engine said; None: not asked

    async def decide(self, client: httpx.AsyncClient, url: str, kind: BackendKind) -> None:
        """Settle the decision for the engine at ``url``, just identified as ``kind``
        (asking it with ``auto``), and log it."""
        reads = DIALECTS[kind].reads_priority
        if self.setting != "auto":
            self.forward = self.setting is True and reads
            why = f"backend.forward_priority: {str(self.setting).lower()}"
            self._log(url, self.forward, why if reads else f"{kind.value} has no request priority")
            return
        if not reads:
            self.forward, self.source = False, "detected"
            self._log(url, False, f"{kind.value} has no request priority")
            return
        try:
            policy = await scheduling_policy(client, url, POLICY_TIMEOUT_S)
        except Exception as exc:  # a broken answer must not stop the gateway
            known = isinstance(exc, BackendError)  # says what failed itself
            self._unknown(url, str(exc) if known else f"{type(exc).__name__}: {exc}")
            return
        if policy is None:
            self._unknown(
                url,
                "no scheduling policy at GET /server_info?config_format=json (vLLM serves "
                "it only when started with VLLM_SERVER_DEV_MODE=1)",
            )
            return
        self.forward, self.source, self.policy = policy == "priority", "detected", policy
        self._log(url, self.forward, f"the engine runs --scheduling-policy {policy}")

    def _unknown(self, url: str, reason: str) -> None:
        self.forward, self.source = False, "unknown"
        log.warning(
            "cannot tell whether the backend schedules by priority: the admission tier is "
            f"not forwarded as the request priority; {UNKNOWN_HINT}",
            extra={"backend": url, **self._fields(), "error": reason},
        )

    def _log(self, url: str, on: bool, why: str) -> None:
        what = "forwarding" if on else "not forwarding"
        log.info(
            f"{what} the admission tier as the request priority: {why}",
            extra={"backend": url, **self._fields()},
        )

    def _fields(self) -> dict[str, object]:
        return {
            "forward_priority": self.forward,
            "forward_priority_source": self.source,
            "scheduling_policy": self.policy,
        }
