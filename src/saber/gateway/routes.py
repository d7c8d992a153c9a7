"""The HTTP face: OpenAI routes relayed, and the gateway's own endpoints."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response

from saber import wire
from saber.gateway import payload as payloads
from saber.gateway.access_log import GATEWAY_LOGGER
from saber.gateway.errors import GatewayError, internal, invalid
from saber.gateway.exchange import Exchange
from saber.gateway.flow import Flow
from saber.gateway.models import model_cards
from saber.gateway.payload import PATHS, Call
from saber.gateway.state import Gateway
from saber.gateway.status import status
from saber.gateway.tasks import BACKEND_MODEL, Endpoint
from saber.gateway.upstream import BackendFailure
from saber.scheduler import Outcome, request_for

log = logging.getLogger(GATEWAY_LOGGER)

router = APIRouter()

COMPLETION_ROUTES: dict[str, Endpoint] = {path: endpoint for endpoint, path in PATHS.items()}
"""The relayed routes: path to endpoint. ``GatewayApp`` serves them directly."""


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


def _completion_route(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        return await completion(_gateway(request), request, endpoint)

    return route


for _path, _endpoint in COMPLETION_ROUTES.items():
    router.add_api_route(_path, _completion_route(_endpoint), methods=["POST"])


async def completion(gw: Gateway, request: Request, endpoint: Endpoint) -> Response:
    """Accept a completion request: stamp its arrival, check and classify it, and hand
    it to an Exchange; or answer it at once. Either way its flow is finalized once."""
    flow = Flow(gw, endpoint)
    try:
        await _accept(flow, request)
    except ClientDisconnect:
        # It never arrived whole: nothing was offered, nothing to count.
        return Response(status_code=499)
    except BackendFailure as failure:
        err = GatewayError(failure.outcome, failure.message)
        return _answer(flow, err, fault=failure.kind)
    except GatewayError as err:
        return _answer(flow, err)
    except Exception as exc:
        log.exception("internal error while accepting a request", extra={"id": flow.id})
        return _answer(flow, internal(exc))
    return Exchange(flow)


async def _accept(flow: Flow, request: Request) -> None:
    """Fill in the flow: its task type, its checked call and its scheduler request."""
    gw, endpoint = flow.gw, flow.endpoint
    _authorize(gw, request)
    header = request.headers.get("x-saber-task")
    if header is not None:
        flow.task = gw.resolver.task_for_header(header)  # fail before reading the body
    raw = await payloads.read_body(request, gw.config.max_body_bytes)
    dialect = gw.dialect
    payload = payloads.parse(endpoint, raw, dialect)
    res = gw.resolver.resolve(
        endpoint,
        header=header,
        model=payload.model,
        max_tokens=payload.max_tokens,
        body=payload.body,
    )
    flow.task, flow.via = res.task, res.via
    model = res.model
    if model is BACKEND_MODEL:
        model = await gw.backend_model()
    assert model is None or isinstance(model, str)
    body = payload.upstream_body(model)
    flow.call = Call(endpoint, payload, body, request.scope["headers"], dialect)
    try:
        flow.req = request_for(
            res.task,
            lengths=gw.scheduler.lengths,
            id=flow.id,
            arrival=flow.arrival,
            max_tokens=payload.max_tokens,
            min_tokens=payload.min_tokens,
        )
    except ValueError as exc:  # a token count no engine serves
        message = str(exc)
        field = message.split(" ", 1)[0]
        shown = message if len(message) <= 200 else message[:200] + "..."
        raise invalid(shown, param=field if field in payload.body else None) from None


def _authorize(gw: Gateway, request: Request) -> None:
    keys = gw.config.api_keys
    if not keys:
        return
    token = wire.bearer_token(request.headers.get("authorization", ""))
    if token is not None and any(hmac.compare_digest(token.encode(), key.encode()) for key in keys):
        return
    raise GatewayError(
        Outcome.UNAUTHORIZED,
        "missing or invalid API key: send 'Authorization: Bearer <key>'",
        code="invalid_api_key",
        headers={"www-authenticate": "Bearer"},
    )


def _answer(flow: Flow, err: GatewayError, fault: str | None = None) -> Response:
    """An answer before queueing, finalized like every other request."""
    flow.finalize(err.outcome, status=err.status, error=err.message, fault=fault)
    return err.response(
        {
            "x-saber-task": flow.task_name,
            "x-saber-outcome": err.outcome.value,
            "x-saber-queue-ms": "0.0",
        }
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
    return JSONResponse({"object": "list", "data": model_cards(backend, gw.resolver)})


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
