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

from saber.backend import BackendKind
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
from saber.gateway.replicas import Replica, Replicas
from saber.gateway.upstream.client import BackendFailure, Upstream
from saber.gateway.upstream.dialect import Dialect
from saber.gateway.upstream.tokenize import Tokenizer
from saber.gateway.upstream.watch import BackendWatch
from saber.scheduler import Decision, Outcome, Policy, Pool, Scheduler, TaskLengths

log = logging.getLogger(GATEWAY_LOGGER)


class Gateway:
    """Built with the app; ``start`` and ``stop`` run in the server's event loop.

    Its backends (``replicas``: one, or several replicas) each have a scheduler in one
    admission ``pool``; ``scheduler``, ``learning`` and ``backend`` are the first
    backend's, the only one of a single-backend config.
    """

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
        profiles = settings.backend_profiles()
        self.metrics = GatewayMetrics(self.tasks, [bp.backend.name for bp in profiles])
        self.reloader = Reloader(lambda: self.settings, self.apply, self.metrics)
        self.seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(2**32)
        self.policy = Policy.from_config(cfg)
        lengths = TaskLengths(
            list(self.tasks.values()),
            learn=self.policy.learn_lengths,
            condition=self.policy.condition_lengths,
        )
        replicas, speeds = [], []
        for i, bp in enumerate(profiles):
            speeds.append(bp.speed_model())
            scheduler = Scheduler(
                speeds[i],
                self.policy,
                tasks=self.tasks,
                ttft=bp.ttft(),
                prefill=bp.prefill(),
                seed=self.seed + i,
                speed_sigma=bp.speed_sigma(),
                lengths=lengths,
            )
            scheduler.set_arrival_share(1.0 / cfg.cluster.gateways)
            replicas.append(Replica(i, bp, scheduler))
        self.pool = Pool(
            [r.scheduler for r in replicas],
            affinity_margin=cfg.cluster.affinity_margin,
            names=[r.name for r in replicas],
        )
        self.replicas = Replicas(
            replicas,
            self.pool,
            lambda: self.config.cluster,
            lambda: self.admission.now(),
            lambda: self.admission.poke(),
        )
        self.tokenizer = Tokenizer(lambda: self.upstream)  # backend.tokenize: exact counts
        several = self.replicas.several
        for r, speed in zip(replicas, speeds, strict=True):
            r.learning = Learning(
                r.scheduler,
                self.metrics,
                speed,
                lambda: self.config,
                lambda: self.admission.now(),
                state_suffix=r.state_suffix(several),
            )
        self.drain = Drain(lambda: self.config.drain_timeout_s, self.pool)
        self.metrics.watch(lambda: self.pool, lambda: self.replicas.all)
        self.metrics.watch_learning(
            LearningCollector(lambda: self.replicas.all, lambda: self.tasks)
        )
        self.passthrough = PassthroughGate(
            cfg.passthrough.max_concurrency, cfg.passthrough.queue_cap
        )
        self.metrics.watch_passthrough(self.passthrough)
        self.metrics.watch_backends(lambda: self.replicas.all)
        self._trace = trace
        self._transport = transport
        self._admission: Admission | None = None
        self._backend_model: str | None = cfg.backend.model
        self.started_at = time.time()

    @property
    def admission(self) -> Admission:
        if self._admission is None:
            raise RuntimeError("the gateway has not started")
        return self._admission

    @property
    def scheduler(self) -> Scheduler:
        return self.replicas.all[0].scheduler

    @property
    def learning(self) -> Learning:
        learning = self.replicas.all[0].learning
        assert learning is not None
        return learning

    @property
    def backend(self) -> BackendWatch:
        return self.replicas.all[0].watch

    @property
    def upstream(self) -> Upstream:
        """A backend's client for what admission does not place: one that serves."""
        return self.replicas.serving().upstream

    @property
    def dialect(self) -> Dialect:
        """How the backends' engine reads requests (vLLM's until it is known); the
        backends of one gateway run one engine, and the first one's is taken."""
        return self.backend.dialect

    def learnings(self) -> list[Learning]:
        return [r.learning for r in self.replicas.all if r.learning is not None]

    def _learned(self) -> None:
        """A request finished: every backend's loop takes what its scheduler observed."""
        for learning in self.learnings():
            learning.drain()

    def _decided(self, d: Decision) -> None:
        self.metrics.on_decision(d)
        self.replicas.on_decision(d)

    async def start(self) -> None:
        self._admission = Admission(
            self.pool,
            on_decision=self._decided,
            on_finish=self._learned,
            on_slot_free=self.metrics.on_slot_free,
            trace=self._trace,
        )
        await self.replicas.start(self._transport)
        for learning in self.learnings():
            await learning.start()
        self.reloader.start()
        s = self.settings
        shipped = [r for r in self.replicas if r.profile.backend.profile is None]
        if s.profile_is_default and shipped:
            kinds = sorted({r.watch.kind.value if r.watch.identified else "?" for r in shipped})
            extra = {"profile": str(s.profile_path), "backend_kinds": kinds}
            if kinds == [BackendKind.SIM.value]:  # what the shipped profile describes
                log.info("profile: the one shipped for saber-sim's paper preset", extra=extra)
            else:
                log.warning(
                    "no profile configured: the one shipped for saber-sim's paper preset does "
                    "not describe this backend; fit one for it with saber-profile "
                    "(docs/profile.md)",
                    extra=extra,
                )
        ttft_tasks = sorted(name for name, t in self.tasks.items() if t.sla_kind == "ttft")
        unfit = [r.name for r in self.replicas if r.profile.ttft() is None]
        if ttft_tasks and unfit:
            log.warning(
                "the profile has no TTFT fit: tasks with a TTFT SLA are admitted as if their "
                "first token took one token's time at f(L); refit the profile with "
                "saber-profile to admit them against the measured time to first token",
                extra={"profile": str(s.profile_path), "ttft_tasks": ttft_tasks, "backends": unfit},
            )
        first = self.replicas.all[0]
        log.info(
            "saber-gateway ready",
            extra={
                "backend": first.settings.url,
                "backend_kind": first.watch.kind.value,
                "kind_source": first.watch.kind_source,
                "backends": [
                    {
                        "name": r.name,
                        "url": r.settings.url,
                        "profile": str(r.profile.profile_path),
                        "f1_tokens_per_s": round(r.scheduler.max_speed, 2),
                    }
                    for r in self.replicas
                ],
                "gateways": self.config.cluster.gateways,
                "profile": str(s.profile_path),
                "speed_model": s.profile.kind,
                "f1_tokens_per_s": round(self.scheduler.max_speed, 2),
                "ttft_fit": first.profile.ttft() is not None,
                "tasks": sorted(self.tasks),
                "policy": self.policy_dict(),
                "transport": self.config.backend.transport,
            },
        )

    async def stop(self) -> None:
        await self.reloader.stop()
        for learning in self.learnings():
            await learning.stop()
        await self.replicas.stop()
        if self._admission is not None:
            self._admission.close()

    def apply(self, settings: GatewaySettings) -> None:
        """Swap in reloaded settings (``reload``; the restart-only ones already kept)."""
        cfg = settings.config
        self.settings, self.config = settings, cfg
        for name, task in cfg.tasks.items():
            self.metrics.add_task(name, task.sla_kind)
        self.tasks = {**self.tasks, **cfg.tasks}  # a task type gone may still be queued
        self.resolver = TaskResolver(cfg)
        self.access = Access(cfg)
        for r, bp in zip(self.replicas, settings.backend_profiles(), strict=True):
            r.scheduler.reconfigure(
                cfg.tasks, max_concurrency=cfg.max_concurrency, queue_cap=cfg.queue_cap
            )
            if bp.profile != r.profile.profile:
                speed = bp.speed_model()
                r.scheduler.set_speed_model(speed)
                r.scheduler.set_ttft(bp.ttft(), bp.prefill())
                if r.learning is not None:
                    r.learning.new_profile(speed)
            r.profile = bp
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
