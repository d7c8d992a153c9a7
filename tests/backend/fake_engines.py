"""Small real HTTP servers that answer the probe endpoints as vLLM or llama.cpp do.

Only for detection and load: they serve no completions. The shapes follow the
engines' sources (llama-server: ``get_res_models``, ``get_res_props``, the
``--metrics`` gate; vLLM: ``/version``, its model cards). Real engines are
covered by the ``vllm`` and ``llamacpp`` test tiers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from expositions import LLAMACPP, VLLM
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from harness import serve_app as serve_testing_app

BUILD_INFO = "b7310-5814b4dce"
VLLM_VERSION = "0.32.0"


def _error(status: int, message: str, type_: str) -> JSONResponse:
    """llama-server's error body: ``code`` is the HTTP status."""
    return JSONResponse(
        {"error": {"code": status, "message": message, "type": type_}}, status_code=status
    )


def llamacpp_app(
    *,
    metrics: bool = True,
    owned_by: str | None = "llamacpp",
    api_key: str | None = None,
    exposition: str = LLAMACPP,
) -> FastAPI:
    """llama-server's /health, /v1/models, /props and /metrics (no /version)."""
    app = FastAPI()
    state = {"exposition": exposition}
    app.state.fake = state

    @app.middleware("http")
    async def auth(request: Request, call_next):  # type: ignore[no-untyped-def]
        public = request.url.path in ("/health", "/v1/health", "/models", "/v1/models")
        authorized = request.headers.get("authorization") == f"Bearer {api_key}"
        if api_key and not public and not authorized:
            return _error(401, "Invalid API Key", "authentication_error")
        return await call_next(request)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, object]:
        card: dict[str, object] = {
            "id": "tiny-gguf",
            "aliases": [],
            "tags": [],
            "object": "model",
            "created": int(time.time()),
            "meta": {"vocab_type": 1, "n_vocab": 512, "n_ctx": 512, "n_ctx_train": 4096},
        }
        if owned_by is not None:
            card["owned_by"] = owned_by
        return {
            "models": [{"name": "tiny-gguf", "model": "tiny-gguf", "type": "model"}],
            "object": "list",
            "data": [card],
        }

    @app.get("/props")
    async def props() -> dict[str, object]:
        return {
            "default_generation_settings": {"n_ctx": 512, "params": {"n_predict": -1}},
            "total_slots": 32,
            "model_alias": "tiny-gguf",
            "model_path": "/models/tiny.gguf",
            "endpoint_metrics": metrics,
            "build_info": BUILD_INFO,
            "is_sleeping": False,
        }

    @app.get("/metrics")
    async def prometheus() -> Response:
        if not metrics:
            return _error(
                501,
                "This server does not support metrics endpoint. Start it with `--metrics`",
                "not_supported_error",
            )
        return PlainTextResponse(state["exposition"], media_type="text/plain; version=0.0.4")

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def not_found(path: str) -> Response:
        return _error(404, "File Not Found", "not_found_error")

    return app


def vllm_app(*, version: bool = True, owned_by: str | None = "vllm") -> FastAPI:
    """vLLM's /health, /version, /v1/models and /metrics."""
    app = FastAPI()

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    if version:

        @app.get("/version")
        async def get_version() -> dict[str, str]:
            return {"version": VLLM_VERSION}

    @app.get("/v1/models")
    async def models() -> dict[str, object]:
        card: dict[str, object] = {
            "id": "tiny-llama",
            "object": "model",
            "created": int(time.time()),
            "root": "/models/tiny-llama",
            "parent": None,
            "max_model_len": 2048,
        }
        if owned_by is not None:
            card["owned_by"] = owned_by
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(VLLM, media_type="text/plain; version=0.0.4; charset=utf-8")

    return app


def bare_app() -> FastAPI:
    """Some other OpenAI-compatible server: models, nothing that names the engine."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict[str, object]:
        return {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "someone"}]}

    return app


@contextmanager
def serve_app(app: FastAPI) -> Iterator[str]:
    """A fake engine has no lifespan to run."""
    with serve_testing_app(app, lifespan="off") as url:
        yield url
