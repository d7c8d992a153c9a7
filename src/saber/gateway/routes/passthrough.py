"""The backend's other routes, relayed as they are: embeddings (codebase indexing in
Continue and Tabby), tokenize and detokenize, pooling, classification, scoring and
reranking, and the version.

They generate no tokens, so the scheduler does not admit them; they still take the
engine's time, so at most ``passthrough.max_concurrency`` of them are at the backend
at once, the others waiting in arrival order (past ``passthrough.queue_cap``
waiting: 429). Each is counted: ``saber_passthrough_requests_total`` by route and
status, ``saber_passthrough_duration_seconds``, and the in-flight and waiting gauges.

``/v1/responses`` is refused with a message that says why: it generates, and the
gateway schedules generation only on the completion routes. ``GET /v1/models/{id}``
is answered by the gateway from the backend's list (vLLM has no such route), aliases
included.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from fastapi import APIRouter, Request
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response

from saber import wire
from saber.gateway.assembly import Gateway, bound_route, gateway_of
from saber.gateway.edge import forwarding
from saber.gateway.edge.payload import read_body
from saber.gateway.edge.tasks import BACKEND_MODEL
from saber.gateway.errors import GatewayError, invalid, quote
from saber.gateway.routes.models import answer_with_models, model_card
from saber.gateway.upstream.client import (
    BackendFailure,
    Upstream,
    classify,
    downstream_headers,
    upstream_headers,
)
from saber.scheduler import Outcome

RELAYED: dict[str, str] = {
    "/v1/embeddings": "POST",
    "/tokenize": "POST",
    "/detokenize": "POST",
    "/pooling": "POST",
    "/classify": "POST",
    "/score": "POST",
    "/v1/score": "POST",
    "/rerank": "POST",
    "/v1/rerank": "POST",
    "/v2/rerank": "POST",
    "/version": "GET",
}
"""Path: method. Passed to the backend as they are; its answer comes back, an error
(a 404 included) with the backend's message in OpenAI's shape."""

NOT_RELAYED = (
    "saber-gateway does not relay {path}: it generates tokens, and the gateway schedules "
    "generation only on /v1/chat/completions and /v1/completions, where it can meet each "
    "request's SLA; send the request there"
)
REFUSED = ("/v1/responses", "/v1/responses/{response_id}", "/v1/responses/{response_id}/cancel")

router = APIRouter()


async def relay_other(gw: Gateway, request: Request, path: str) -> Response:
    """Relay one request of a pass-through route, counted under ``path``. Its key was
    checked with every route's (``access``)."""
    started = time.perf_counter()
    status = 0
    try:
        try:
            body = await read_body(request, gw.config.max_body_bytes, gw.config.body_timeout_s)
            body = await _real_model(gw, body)
            await gw.passthrough.enter()
        except ClientDisconnect:
            status = 499
            return Response(status_code=499)
        except GatewayError as err:
            status = err.status
            return err.response()
        except BackendFailure as failure:  # the real model behind an alias is unknown
            refusal = GatewayError(failure.outcome, failure.message)
            status = refusal.status
            return refusal.response()
        replica = gw.replicas.serving()
        try:
            response = await _send(replica.upstream, request, path, body)
        except BackendFailure as failure:
            refusal = GatewayError(failure.outcome, failure.message)
            status = refusal.status
            gw.metrics.backend_error(failure.kind, replica.name)
            return refusal.response()
        finally:
            gw.passthrough.leave()
        status = response.status_code
        return response
    finally:
        gw.metrics.on_passthrough(path, status, time.perf_counter() - started)


async def _send(upstream: Upstream, request: Request, path: str, body: bytes) -> Response:
    """The backend's whole answer (a dropped kept-alive connection is tried again, as
    for completions); BackendFailure if none comes."""
    query = request.url.query
    outgoing = httpx.Request(
        request.method,
        upstream.base + path + (f"?{query}" if query else ""),
        headers=upstream_headers(forwarding.headers(request.scope), upstream.settings.api_key),
        content=body or None,
        extensions={"timeout": upstream.client.timeout.as_dict()},
    )
    async with upstream.open(outgoing) as resp:
        try:
            content = await resp.aread()
        except httpx.HTTPError as exc:
            raise classify(exc, streaming=True) from exc
    status = resp.status_code
    if status < 400:
        return Response(content, status_code=status, headers=_headers(resp))
    # An error in OpenAI's shape, its message kept: FastAPI's {"detail": "Not Found"}
    # (a route the backend lacks) would show in an SDK as nothing but its status.
    code = "backend_rejected" if status < 500 else "backend_error"
    body = json.dumps(wire.openai_error(content, status, code=code)).encode()
    headers = _headers(resp, drop=("content-type",))
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def _headers(resp: httpx.Response, drop: tuple[str, ...] = ()) -> dict[str, str]:
    pairs = downstream_headers(resp.headers)
    return {
        name: v.decode("latin-1") for k, v in pairs if (name := k.decode("latin-1")) not in drop
    }


async def _real_model(gw: Gateway, body: bytes) -> bytes:
    """The body with an alias in ``model`` replaced by the real model name; as it came
    otherwise (not JSON, no model, not an alias)."""
    if b'"model"' not in body:
        return body
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return body
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        return body
    alias = gw.resolver.alias(data["model"])
    if alias is None:
        return body
    real = alias[1] if alias[1] is not BACKEND_MODEL else await gw.backend_model()
    try:
        return json.dumps({**data, "model": real}, ensure_ascii=False).encode()
    except (UnicodeEncodeError, RecursionError, ValueError):
        raise invalid("the request body cannot be relayed as JSON (a lone surrogate?)") from None


for _path, _method in RELAYED.items():
    router.add_api_route(_path, bound_route(relay_other, _path), methods=[_method])


async def _refused(request: Request) -> Response:
    # 501, permanent: the OpenAI SDKs would retry a 5xx, but they obey x-should-retry.
    return GatewayError(
        Outcome.INVALID_REQUEST,
        NOT_RELAYED.format(path=quote(request.url.path)),
        status=501,
        code="not_relayed",
        headers={"x-should-retry": "false"},
    ).response()


for _path in REFUSED:
    router.add_api_route(_path, _refused, methods=["GET", "POST", "DELETE"])


@router.get("/v1/models/{model_id:path}")
async def model(request: Request, model_id: str) -> Response:
    gw = gateway_of(request)

    def render(backend: list[dict[str, Any]]) -> Response:
        card = model_card(backend, gw.resolver, model_id)
        if card is None:
            message = f"The model {quote(model_id)} does not exist."
            body = wire.error_body(message, 404, code="model_not_found", param="model")
            return JSONResponse(body, status_code=404)
        return JSONResponse(card)

    return await answer_with_models(gw, render)
