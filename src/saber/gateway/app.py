"""The FastAPI application: routes, the gateway's lifecycle, OpenAI-style errors."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from saber import wire
from saber.gateway.assembly import Gateway
from saber.gateway.control.settings import GatewaySettings
from saber.gateway.errors import internal
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.gateway.routes import passthrough
from saber.gateway.routes.endpoints import COMPLETION_ROUTES, completion, router

log = logging.getLogger(GATEWAY_LOGGER)


def create_app(
    settings: GatewaySettings,
    *,
    trace: bool = False,
    transport: httpx.AsyncBaseTransport | None = None,
) -> GatewayApp:
    """A gateway app for ``settings``. ``trace`` records every scheduler call
    (``app.state.gateway.admission.trace``) so a test can replay it; ``transport``
    replaces the upstream connection (tests)."""
    gateway = Gateway(settings, trace=trace, transport=transport)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    api = FastAPI(
        title="saber-gateway",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        # Starlette's redirect for a trailing slash builds its Location from the
        # client's Host header (a 307 to any host the client names): a 404 instead.
        redirect_slashes=False,
    )
    api.state.gateway = gateway
    api.include_router(router)
    api.include_router(passthrough.router)
    api.add_exception_handler(HTTPException, _http_error)
    api.add_exception_handler(RequestValidationError, _validation_error)
    api.add_exception_handler(Exception, _unexpected)
    return GatewayApp(api, gateway)


class GatewayApp:
    """The ASGI app uvicorn serves.

    The relayed routes (``COMPLETION_ROUTES``) go straight to their handler;
    everything else, and the lifespan, goes through FastAPI. FastAPI's middleware,
    routing and dependency layers cost about a third of the gateway's own time per
    request (bench/overhead.py), which every relayed request would pay; the handler
    is the same one FastAPI's routes call.

    Access is checked here, once for every route (``access``): a completion request
    checks its key where its flow is accepted, so that a refusal is counted like any
    other outcome; any other route without a valid key gets its 401 here.
    """

    def __init__(self, api: FastAPI, gateway: Gateway) -> None:
        self.api = api
        self.gateway = gateway
        self.state = api.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.api(scope, receive, send)
            return
        endpoint = COMPLETION_ROUTES.get(scope.get("path", ""))
        if endpoint is None or scope["method"] != "POST":
            refused = self.gateway.access.route(scope)
            if refused is not None:
                self.gateway.metrics.auth_failures.inc()
                await refused(scope, receive, send)
                return
            await self.api(scope, receive, send)
            return
        drain = self.gateway.drain
        drain.enter()
        try:
            try:
                response = await completion(self.gateway, Request(scope, receive), endpoint)
            except Exception as exc:  # before its flow existed (a gateway not started)
                response = await _unexpected(Request(scope), exc)
            await response(scope, receive, send)
        finally:
            drain.leave()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    body = wire.error_body(str(exc.detail), exc.status_code, code=_code(exc.status_code))
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


async def _validation_error(request: Request, exc: Exception) -> Response:  # pragma: no cover
    return JSONResponse(wire.error_body(str(exc), 400), status_code=400)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unhandled error", exc_info=exc)
    return internal(exc).response()


def _code(status: int) -> str:
    return {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
