"""The HTTP face: OpenAI routes relayed, and the gateway's own endpoints."""

from __future__ import annotations

import hmac
import time
from typing import Any

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response

from saber.gateway import payload as payloads
from saber.gateway.access_log import log_request
from saber.gateway.errors import GatewayError
from saber.gateway.exchange import Exchange
from saber.gateway.outcomes import Outcome
from saber.gateway.payload import Call
from saber.gateway.state import Gateway
from saber.gateway.status import status
from saber.gateway.tasks import BACKEND_MODEL, Endpoint
from saber.gateway.upstream import BackendFailure

router = APIRouter()


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await completion(_gateway(request), request, "chat")


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    return await completion(_gateway(request), request, "completions")


async def completion(gw: Gateway, request: Request, endpoint: Endpoint) -> Response:
    """Check a completion request and hand it to an Exchange, or refuse it."""
    received = time.perf_counter()
    task_name = "unknown"
    try:
        _authorize(gw, request)
        header = request.headers.get("x-saber-task")
        if header is not None:
            task_name = gw.resolver.task_for_header(header).name  # fail before reading the body
        raw = await payloads.read_body(request, gw.config.max_body_bytes)
        dialect = gw.dialect
        payload = payloads.parse(endpoint, raw, dialect)
        res = gw.resolver.resolve(
            endpoint, header=header, model=payload.model, max_tokens=payload.max_tokens
        )
        task_name = res.task.name
        model = res.model
        if model is BACKEND_MODEL:
            model = await gw.backend_model()
        assert model is None or isinstance(model, str)
        body = payload.upstream_body(model)
    except ClientDisconnect:
        return Response(status_code=499)
    except BackendFailure as failure:
        gw.metrics.backend_errors.labels(failure.kind).inc()
        return _refuse(gw, GatewayError(failure.outcome, failure.message), task_name, endpoint)
    except GatewayError as err:
        return _refuse(gw, err, task_name, endpoint)
    call = Call(
        endpoint, payload, body, request.scope["headers"], res.task, res.via, received, dialect
    )
    return Exchange(gw, call)


def _authorize(gw: Gateway, request: Request) -> None:
    keys = gw.config.api_keys
    if not keys:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() == "bearer" and any(
        hmac.compare_digest(token.strip().encode(), key.encode()) for key in keys
    ):
        return
    raise GatewayError(
        Outcome.UNAUTHORIZED,
        "missing or invalid API key: send 'Authorization: Bearer <key>'",
        code="invalid_api_key",
        headers={"www-authenticate": "Bearer"},
    )


def _refuse(gw: Gateway, err: GatewayError, task: str, endpoint: Endpoint) -> Response:
    """An answer before queueing: counted and logged like every other request."""
    gw.metrics.task(task).outcomes[err.outcome].inc()
    if gw.config.log_requests:
        log_request(
            {
                "endpoint": endpoint,
                "task": task,
                "outcome": err.outcome.value,
                "status": err.status,
                "error": err.message,
                "queue_ms": None,
                "tokens": 0,
                "latency_ms": None,
            }
        )
    return err.response(
        {"x-saber-task": task, "x-saber-outcome": err.outcome.value, "x-saber-queue-ms": "0.0"}
    )


@router.get("/v1/models")
async def models(request: Request) -> Response:
    gw = _gateway(request)
    try:
        _authorize(gw, request)
        backend = await gw.backend_models()
    except GatewayError as err:
        return err.response()
    except BackendFailure as failure:
        return GatewayError(failure.outcome, failure.message).response()
    ids = [m["id"] for m in backend]
    owned = {m["id"]: m for m in backend}
    aliases: list[dict[str, Any]] = [
        {
            "id": alias,
            "object": "model",
            "created": owned.get(real, {}).get("created", 0),
            "owned_by": "saber-gateway",
            "root": real,
            "parent": real,
        }
        for alias, real in gw.resolver.alias_names(ids)
        if alias not in owned
    ]
    return JSONResponse({"object": "list", "data": backend + aliases})


@router.get("/health")
async def health(request: Request) -> Response:
    """200 when the backend answers its /health, 503 when it does not or answers 5xx;
    the gateway is up either way."""
    gw = _gateway(request)
    backend: dict[str, Any] = {"url": gw.config.backend.url}
    try:
        code, _ = await gw.upstream.get_json("/health", timeout=1.0)
        backend.update(reachable=True, status_code=code)
    except BackendFailure as failure:
        backend.update(reachable=False, error=failure.message)
    # A backend that answers 5xx is up but not serving (llama.cpp: still loading).
    ok = backend["reachable"] and backend["status_code"] < 500
    unwell = "backend_unhealthy" if backend["reachable"] else "backend_unreachable"
    body = {
        "status": "ok" if ok else unwell,
        "gateway": "ok",
        "backend": backend,
        "in_flight": gw.scheduler.load,
        "queued": gw.scheduler.queued(),
    }
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(
        generate_latest(_gateway(request).metrics.registry), media_type=CONTENT_TYPE_LATEST
    )


@router.get("/saber/status")
async def saber_status(request: Request) -> Response:
    return JSONResponse(status(_gateway(request)))
