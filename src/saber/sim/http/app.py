"""The saber-sim ASGI app: vLLM's OpenAI routes over the real-time engine model."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from saber import __version__
from saber.engine import BLOCK_SIZE, Engine, get_preset
from saber.sim.http.disconnect import ClientGone, EventStreamResponse, until_disconnect
from saber.sim.http.driver import RealTimeDriver
from saber.sim.http.faults.injection import Faults
from saber.sim.http.faults.listener import ListenerControl
from saber.sim.http.generation import Generation
from saber.sim.http.lengths import OutputLengths
from saber.sim.http.metrics import SimMetrics
from saber.sim.http.protocol import Generate, parse_chat, parse_completion, parse_json
from saber.sim.http.responses.embeddings import embeddings
from saber.sim.http.responses.errors import ApiError
from saber.sim.http.responses.streaming import (
    ChatFormat,
    CompletionFormat,
    ToolChatFormat,
    event_stream,
    whole_response,
)
from saber.sim.http.server_info import router as server_info_router
from saber.sim.http.settings import SimSettings


@dataclass
class SimState:
    """Everything one app instance owns; ``app.state.sim``."""

    settings: SimSettings
    engine: Engine
    driver: RealTimeDriver
    metrics: SimMetrics
    lengths: OutputLengths
    faults: Faults
    listener: ListenerControl
    created: int


class FaultUpdate(BaseModel):
    """Body of ``POST /sim/faults``: the settings to change."""

    model_config = ConfigDict(extra="forbid")
    error_rate: float | None = Field(None, ge=0, le=1)
    stall_prob: float | None = Field(None, ge=0, le=1)
    stall_after: int | None = Field(None, ge=0)
    refuse_for: float | None = Field(None, gt=0)


def create_app(settings: SimSettings | None = None) -> FastAPI:
    """A fresh app with its own engine, clock, metrics registry and faults."""
    settings = settings or SimSettings()
    preset = get_preset(settings.preset)
    engine = Engine(
        preset,
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        kv_capacity_tokens=settings.kv_capacity_tokens,
        scheduling_policy=settings.scheduling_policy,
    )
    kv_tokens = engine.num_blocks * BLOCK_SIZE
    if settings.max_model_len > kv_tokens:
        raise ValueError(
            f"max_model_len {settings.max_model_len} is larger than the KV cache "
            f"({kv_tokens} tokens); lower --max-model-len or raise --kv-capacity-tokens"
        )
    sim = SimState(
        settings=settings,
        engine=engine,
        driver=RealTimeDriver(engine, time_scale=settings.time_scale),
        metrics=SimMetrics(engine, settings.model_name),
        lengths=OutputLengths(
            settings.output_len, settings.fallback_output_len, seed=settings.seed
        ),
        faults=Faults(settings.faults, seed=settings.seed),
        listener=ListenerControl(),
        created=int(time.time()),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await sim.driver.start()
        try:
            yield
        finally:
            await sim.driver.stop()

    app = FastAPI(title="saber-sim", version=__version__, lifespan=lifespan)
    app.state.sim = sim
    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        # vLLM's shape, plus a field vLLM does not send, so that clients (the
        # gateway's backend detection) can tell saber-sim from vLLM.
        return {"version": __version__, "engine": "saber-sim"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(sim, name) for name in settings.model_names]}

    if settings.dev_mode:  # as vLLM: only in developer mode
        app.include_router(server_info_router(settings))

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(sim.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _generate(sim, request, parse_completion, CompletionFormat, "cmpl")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await _generate(sim, request, parse_chat, ChatFormat, "chatcmpl")

    @app.post("/v1/embeddings")
    async def embed(request: Request) -> dict[str, Any]:
        return embeddings(parse_json(await request.body()), settings.model_names)

    @app.get("/sim/faults")
    async def get_faults() -> dict[str, Any]:
        return _fault_state(sim)

    @app.post("/sim/faults")
    async def set_faults(request: Request) -> dict[str, Any]:
        try:
            update = FaultUpdate.model_validate(parse_json(await request.body()))
        except ValidationError as exc:
            raise ApiError(str(exc).replace("\n", " ")) from None
        changes = update.model_dump(exclude_none=True)
        refuse_for = changes.pop("refuse_for", None)
        if refuse_for is not None and not sim.listener.attached:
            raise ApiError("refusing connections needs a server started by saber-sim")
        sim.faults.update(changes)
        if refuse_for is not None:
            sim.listener.refuse(refuse_for)
        return _fault_state(sim)

    @app.get("/sim/state")
    async def state() -> dict[str, Any]:
        e = sim.engine
        return {
            "num_running": e.num_running,
            "num_waiting": e.num_waiting,
            "kv_cache_usage": e.kv_usage,
            "engine_time": sim.driver.engine_now(),
            "time_scale": settings.time_scale,
            "scheduling_policy": e.scheduling_policy,
        }

    return app


async def _generate(
    sim: SimState,
    request: Request,
    parse: Callable[[dict[str, Any], tuple[str, ...], int], Generate],
    fmt_cls: type[CompletionFormat] | type[ChatFormat],
    prefix: str,
) -> Response:
    s = sim.settings
    params = parse(parse_json(await request.body()), s.model_names, s.max_model_len)
    fault = sim.faults.decide()
    if fault.error:
        raise ApiError("Internal server error (injected fault)", HTTPStatus.INTERNAL_SERVER_ERROR)
    request_id = f"{prefix}-{uuid.uuid4().hex}"
    gen = Generation(
        request_id, params, driver=sim.driver, lengths=sim.lengths, metrics=sim.metrics
    )
    gen.start()
    fmt = fmt_cls(request_id, params.model)
    if params.tool is not None:
        fmt = ToolChatFormat(request_id, params.model, params.tool)
    if params.stream:
        return EventStreamResponse(event_stream(gen, fmt, fault), on_close=gen.close)
    try:
        body = await until_disconnect(whole_response(gen, fmt, fault), request.receive)
    except ClientGone:
        return Response(status_code=499)  # nobody reads it
    finally:
        gen.close()
    return JSONResponse(body)


def _model_card(sim: SimState, name: str) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": sim.created,
        "owned_by": "vllm",
        "root": name,
        "parent": None,
        "max_model_len": sim.settings.max_model_len,
        "permission": [
            {
                "id": f"modelperm-{uuid.uuid5(uuid.NAMESPACE_DNS, name).hex}",
                "object": "model_permission",
                "created": sim.created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }


def _fault_state(sim: SimState) -> dict[str, Any]:
    f = sim.faults.settings
    return {
        "error_rate": f.error_rate,
        "stall_prob": f.stall_prob,
        "stall_after": f.stall_after,
        "refusing_for": sim.listener.refusing_for,
    }


async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
    return exc.response()
