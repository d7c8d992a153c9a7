"""The HTTP face: OpenAI routes relayed, and the gateway's own endpoints."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response

from saber.gateway.admission.cost import check_sequences, scheduler_request
from saber.gateway.admission.flow import Flow
from saber.gateway.assembly import Gateway, bound_route, gateway_of
from saber.gateway.control.drain import draining_error
from saber.gateway.edge import forwarding, honesty
from saber.gateway.edge import payload as payloads
from saber.gateway.edge.affinity import session_key
from saber.gateway.edge.payload import PATHS, Call
from saber.gateway.edge.slo import requested_slo
from saber.gateway.edge.tasks import BACKEND_MODEL, Endpoint
from saber.gateway.errors import GatewayError, internal, invalid
from saber.gateway.exchange.response import Exchange
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.gateway.routes.models import answer_with_models, model_cards
from saber.gateway.routes.status import status
from saber.gateway.upstream.client import BackendFailure
from saber.scheduler import Outcome

log = logging.getLogger(GATEWAY_LOGGER)

router = APIRouter()

COMPLETION_ROUTES: dict[str, Endpoint] = {path: endpoint for endpoint, path in PATHS.items()}
"""The relayed routes: path to endpoint. ``GatewayApp`` serves them directly."""


async def completion(gw: Gateway, request: Request, endpoint: Endpoint) -> Response:
    """Accept a completion request: stamp its arrival, check and classify it, and hand
    it to an Exchange; or answer it at once. Either way its flow is finalized once."""
    flow = Flow(gw.admission, gw.metrics, endpoint, log_requests=lambda: gw.config.log_requests)
    try:
        if gw.drain.draining:
            raise draining_error()
        await _accept(gw, flow, request)
    except ClientDisconnect:
        # It never arrived whole: nothing was offered; counted, and nobody to answer.
        message = "the client went away before its request body arrived"
        return _answer(flow, GatewayError(Outcome.CANCELLED_UPLOAD, message))
    except BackendFailure as failure:
        unavailable = failure.outcome is Outcome.BACKEND_UNAVAILABLE
        headers = {"retry-after": "1"} if unavailable else None
        err = GatewayError(failure.outcome, failure.message, headers=headers)
        return _answer(flow, err, fault=failure.kind)
    except GatewayError as err:
        return _answer(flow, err)
    except Exception as exc:
        log.exception("internal error while accepting a request", extra={"id": flow.id})
        return _answer(flow, internal(exc))
    return Exchange(gw, flow)


for _path, _endpoint in COMPLETION_ROUTES.items():
    router.add_api_route(_path, bound_route(completion, _endpoint), methods=["POST"])


async def _accept(gw: Gateway, flow: Flow, request: Request) -> None:
    """Fill in the flow: its task type, its checked call and its scheduler request."""
    endpoint, cfg = flow.endpoint, gw.config
    flow.key = gw.access.client(request.scope)
    header = request.headers.get("x-saber-task")
    if header is not None:
        flow.task = gw.resolver.task_for_header(header)  # fail before reading the body
    raw = await payloads.read_body(request, cfg.max_body_bytes, cfg.body_timeout_s)
    dialect = gw.dialect
    payload = payloads.parse(endpoint, raw, dialect)
    check_sequences(payload.seqs, cfg.sequence_limit())
    res = gw.resolver.resolve(
        endpoint,
        header=header,
        model=payload.model,
        max_tokens=payload.max_tokens,
        sequences=payload.seqs.total,
        body=payload.body,
    )
    flow.task, flow.via = res.task, res.via
    if res.model is None:
        gw.resolver.check_model_task(payload.model, gw.backend.models)
    if flow.key is not None:
        flow.task = flow.key.task_for(res.task, res.via, gw.tasks)
        if flow.task is not res.task:
            flow.via = "default"  # the key's
    cap = honesty.cap_for(flow.task, flow.key, cfg.task_max_tokens)
    honesty.enforce(payload, flow.task, cap, cfg.task_max_tokens)
    model = res.model
    if model is BACKEND_MODEL or payload.model is None:
        # No model named (or an alias for none): the backend's served model, said so in
        # the answer's x-saber-default-model header when the client sent none.
        model = await gw.backend_model()
        flow.default_model = model if payload.model is None else None
    assert model is None or isinstance(model, str)
    body = payload.upstream_body(model, cap)
    flow.call = Call(endpoint, payload, body, forwarding.headers(request.scope), dialect)
    flow.slo = requested_slo(request.headers, flow.task, flow.key)
    counted = None
    if cfg.backend.tokenize and payload.prompt.tokens is None:
        counted = await gw.tokenizer.count(endpoint == "chat", payload.body, model, dialect)
    try:
        flow.req = scheduler_request(
            flow.task,
            payload,
            cap,
            id=flow.id,
            arrival=flow.arrival,
            lengths=gw.scheduler.lengths,
            affinity=_session(gw, flow, request),
            slo=flow.slo,
            prompt_tokens=counted,
        )
    except ValueError as exc:  # a token count no engine serves
        message = str(exc)
        field = message.split(" ", 1)[0]
        shown = message if len(message) <= 200 else message[:200] + "..."
        raise invalid(shown, param=field if field in payload.body else None) from None


def _session(gw: Gateway, flow: Flow, request: Request) -> str | None:
    """The request's session key, where the pool keeps sessions on their backends."""
    if gw.pool.affinity_margin is None or not gw.replicas.several:
        return None
    return session_key(request.scope, flow.key, gw.config.cluster.affinity_header)


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
    gw = gateway_of(request)
    return await answer_with_models(
        gw,
        lambda backend: JSONResponse({"object": "list", "data": model_cards(backend, gw.resolver)}),
    )


@router.get("/health")
async def health(request: Request) -> Response:
    """200 when the backend answers its /health, 503 when it does not or answers 5xx,
    or while the gateway drains; the gateway is up either way."""
    gw = gateway_of(request)
    status, url, backend = await _readiness(gw)
    body: dict[str, Any] = {
        "status": status,
        "gateway": "draining" if gw.drain.draining else "ok",
        "backend": {"url": url, **backend},
        "in_flight": gw.pool.load,
        "queued": gw.pool.queued(),
    }
    if gw.replicas.several:
        body["backends"] = [
            {"name": r.name, "url": r.settings.url, "ejected": r.ejected} for r in gw.replicas
        ]
    return JSONResponse(body, status_code=200 if status == "ok" else 503)


@router.get("/health/live")
async def live(request: Request) -> Response:
    """200 while the process serves HTTP, draining or not (no key needed)."""
    return JSONResponse({"status": "ok"})


@router.get("/health/ready")
async def ready(request: Request) -> Response:
    """200 when the gateway takes requests: not draining, and the backend answers its
    /health below 500 (no key needed, so it says no more than that)."""
    status, _, _ = await _readiness(gateway_of(request))
    return JSONResponse({"status": status}, status_code=200 if status == "ok" else 503)


async def _readiness(gw: Gateway) -> tuple[str, str, dict[str, Any]]:
    """``ok``, ``draining``, ``backend_unhealthy`` or ``backend_unreachable``, the URL of
    the backend asked, and what its /health said. Of several backends, each not ejected
    is asked in turn until one answers below 500: one serving is enough."""
    if gw.drain.draining:
        return "draining", gw.replicas.serving().settings.url, {}
    asked = [r for r in gw.replicas if not r.ejected] or list(gw.replicas)
    for replica in asked:
        url = replica.settings.url
        backend: dict[str, Any]
        try:
            code, _ = await replica.upstream.get_json("/health", timeout=1.0)
            backend = {"reachable": True, "status_code": code}
        except BackendFailure as failure:
            backend = {"reachable": False, "error": failure.message}
        # A backend that answers 5xx is up but not serving (llama.cpp: still loading).
        if backend["reachable"] and backend["status_code"] < 500:
            return "ok", url, backend
    status = "backend_unhealthy" if backend["reachable"] else "backend_unreachable"
    return status, url, backend


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(gateway_of(request).metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


@router.get("/saber/status")
async def saber_status(request: Request) -> Response:
    return JSONResponse(status(gateway_of(request)))
