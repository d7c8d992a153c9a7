"""One gateway assembled from its parts: scheduler, admission, upstream client, metrics,
control. Only the routes, the exchange and the app see it; the parts are handed what
they need.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
from starlette.requests import Request
from starlette.responses import Response

from saber.config import TaskType
from saber.gateway.admission.driver import Admission
from saber.gateway.admission.gate import PassthroughGate
from saber.gateway.control.drain import Drain
from saber.gateway.control.learning import Learning
from saber.gateway.control.reload import Reloader
from saber.gateway.control.settings import GatewaySettings
from saber.gateway.edge.access import Access
from saber.gateway.edge.tasks import TaskResolver
from saber.gateway.observe.collectors import LearningCollector
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.gateway.observe.metrics import GatewayMetrics
from saber.gateway.upstream.client import BackendFailure, Upstream, make_client
from saber.gateway.upstream.dialect import Dialect
from saber.gateway.upstream.watch import BackendWatch, control_client
from saber.scheduler import Outcome, Policy, Scheduler

log = logging.getLogger(GATEWAY_LOGGER)


class Gateway:
    """Built with the app; ``start`` and ``stop`` run in the server's event loop."""

    def __init__(
        self,
        settings: GatewaySettings,
        *,
        trace: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        cfg = settings.config
        self.settings = settings
        self.config = cfg
        self.tasks: dict[str, TaskType] = dict(cfg.tasks)
        self.resolver = TaskResolver(cfg)
        self.access = Access(cfg)
        self.metrics = GatewayMetrics(self.tasks)
        self.reloader = Reloader(lambda: self.settings, self.apply, self.metrics)
        self.seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(2**32)
        self.policy = Policy.from_config(cfg)
        self.speed = settings.speed_model()
        self.ttft_fit = settings.ttft()
        self.scheduler = Scheduler(
            self.speed,
            self.policy,
            tasks=self.tasks,
            ttft=self.ttft_fit,
            seed=self.seed,
            speed_sigma=settings.speed_sigma(),
        )
        self.drain = Drain(lambda: self.config.drain_timeout_s, self.scheduler)
        self.metrics.watch(lambda: self.scheduler)
        self.learning = Learning(
            self.scheduler,
            self.metrics,
            self.speed,
            lambda: self.config,
            lambda: self.admission.now(),
        )
        self.metrics.watch_learning(
            LearningCollector(self.scheduler, self.learning.profile_ratio, lambda: self.tasks)
        )
        self.backend = BackendWatch(cfg.backend)
        self.passthrough = PassthroughGate(
            cfg.passthrough.max_concurrency, cfg.passthrough.queue_cap
        )
        self.metrics.watch_passthrough(self.passthrough)
        self.metrics.watch_backend(self.backend)
        self._trace = trace
        self._transport = transport
        self._admission: Admission | None = None
        self._upstream: Upstream | None = None
        self._backend_model: str | None = cfg.backend.model
        self.started_at = time.time()

    @property
    def admission(self) -> Admission:
        if self._admission is None:
            raise RuntimeError("the gateway has not started")
        return self._admission

    @property
    def upstream(self) -> Upstream:
        if self._upstream is None:
            raise RuntimeError("the gateway has not started")
        return self._upstream

    @property
    def dialect(self) -> Dialect:
        """How the backend's engine reads requests (vLLM's until it is known)."""
        return self.backend.dialect

    async def start(self) -> None:
        self._admission = Admission(
            self.scheduler,
            on_decision=self.metrics.on_decision,
            on_finish=self.learning.drain,
            on_slot_free=self.metrics.on_slot_free,
            trace=self._trace,
        )
        self._upstream = Upstream(
            self.config.backend, make_client(self.config.backend, self._transport)
        )
        await self.backend.start(control_client(self.config.backend, self._transport))
        await self.learning.start()
        self.reloader.start()
        s = self.settings
        if s.profile_is_default:
            log.warning(
                "no profile configured: using the default profile shipped for saber-sim's "
                "paper preset; fit one for your backend with saber-profile",
                extra={"profile": str(s.profile_path)},
            )
        ttft_tasks = sorted(name for name, t in self.tasks.items() if t.sla_kind == "ttft")
        if ttft_tasks and self.ttft_fit is None:
            log.warning(
                "the profile has no TTFT fit: tasks with a TTFT SLA are admitted as if their "
                "first token took one token's time at f(L); refit the profile with "
                "saber-profile to admit them against the measured time to first token",
                extra={"profile": str(s.profile_path), "ttft_tasks": ttft_tasks},
            )
        log.info(
            "saber-gateway ready",
            extra={
                "backend": self.config.backend.url,
                "backend_kind": self.backend.kind.value,
                "kind_source": self.backend.kind_source,
                "profile": str(s.profile_path),
                "speed_model": s.profile.kind,
                "f1_tokens_per_s": round(self.scheduler.max_speed, 2),
                "ttft_fit": self.ttft_fit is not None,
                "tasks": sorted(self.tasks),
                "policy": self.policy_dict(),
                "transport": self.config.backend.transport,
            },
        )

    async def stop(self) -> None:
        await self.reloader.stop()
        await self.learning.stop()
        await self.backend.stop()
        if self._admission is not None:
            self._admission.close()
        if self._upstream is not None:
            await self._upstream.aclose()

    def apply(self, settings: GatewaySettings) -> None:
        """Swap in reloaded settings (``reload``; the restart-only ones already kept)."""
        cfg = settings.config
        old = self.settings
        self.settings, self.config = settings, cfg
        for name, task in cfg.tasks.items():
            self.metrics.add_task(name, task.sla_kind)
        self.tasks = {**self.tasks, **cfg.tasks}  # a task type gone may still be queued
        self.resolver = TaskResolver(cfg)
        self.access = Access(cfg)
        self.scheduler.reconfigure(
            cfg.tasks, max_concurrency=cfg.max_concurrency, queue_cap=cfg.queue_cap
        )
        if settings.profile != old.profile:
            self.speed = settings.speed_model()
            self.scheduler.set_speed_model(self.speed)
            self.ttft_fit = settings.ttft()
            self.scheduler.set_ttft(self.ttft_fit)
            self.learning.new_profile(self.speed)
        if self._admission is not None:
            self._admission.poke()  # a higher cap, or a new curve, may admit now

    async def reload(
        self, settings: GatewaySettings | None = None, *, trigger: str = "call"
    ) -> bool:
        """Read the config and profile again (or take ``settings``) and apply them; False
        if they were refused (logged; the settings in force stay)."""
        return await self.reloader.reload(settings, trigger=trigger)

    def policy_dict(self) -> dict[str, Any]:
        return {**self.policy.as_dict(), "seed": self.seed}

    # -- the backend's models --------------------------------------------------------

    async def backend_models(self) -> list[dict[str, Any]]:
        """The backend's GET /v1/models list; BackendFailure if it cannot be had."""
        status, data = await self.upstream.get_json("/v1/models")
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get("data"), list):
            kind = (
                "status_4xx"
                if 400 <= status < 500
                else "status_5xx"
                if status >= 500
                else "bad_response"
            )
            raise BackendFailure(
                Outcome.BACKEND_ERROR, kind, f"the backend's /v1/models answered {status}"
            )
        models = [m for m in data["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        if models and self._backend_model is None:
            self._backend_model = models[0]["id"]
        return models

    async def backend_model(self) -> str:
        """The model an alias without one stands for: configured, else the backend's first."""
        if self._backend_model is None:
            models = await self.backend_models()
            if not models:
                raise BackendFailure(
                    Outcome.BACKEND_ERROR, "bad_response", "the backend lists no models"
                )
        assert self._backend_model is not None
        return self._backend_model


def gateway_of(request: Request) -> Gateway:
    """The Gateway serving ``request`` (``create_app`` puts it in the app's state)."""
    gateway: Gateway = request.app.state.gateway
    return gateway


_Arg = TypeVar("_Arg")


def bound_route(
    handler: Callable[[Gateway, Request, _Arg], Awaitable[Response]], arg: _Arg
) -> Callable[[Request], Awaitable[Response]]:
    """A route for FastAPI that calls ``handler(gateway, request, arg)``: one function
    per path, each with its own ``arg`` (an endpoint, a pass-through path)."""

    async def route(request: Request) -> Response:
        return await handler(gateway_of(request), request, arg)

    return route
