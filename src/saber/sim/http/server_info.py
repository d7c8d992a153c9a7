"""``GET /server_info``: vLLM's developer-mode report of its configuration.

vLLM 0.32 serves it only when started with ``VLLM_SERVER_DEV_MODE=1``
(``vllm/entrypoints/launchers/api_server/routers.py``); without, the path is a
404. ``config_format`` is ``text`` (the default: ``vllm_config`` is
``str(VllmConfig)``, a line of ``key=value`` that does not carry the scheduling
policy) or ``json`` (pydantic's dump of the config: the policy at
``vllm_config.scheduler_config.policy``); anything else is a 400. saber-sim fills in
what it models (the scheduler's policy and limits, the served model, the context
length) under vLLM's names; of the environment, only that it runs in developer mode.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from saber import wire
from saber.sim.http.settings import SimSettings

DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
FORMATS = ("text", "json")


def dev_mode(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``VLLM_SERVER_DEV_MODE`` is on, read as vLLM reads it: an integer, 0 off."""
    raw = (os.environ if env is None else env).get(DEV_MODE_ENV, "0")
    try:
        return bool(int(raw))
    except ValueError:
        raise ValueError(f"{DEV_MODE_ENV} must be an integer (0 or 1), got {raw!r}") from None


def router(settings: SimSettings) -> APIRouter:
    """The route, for an app started in developer mode."""
    api = APIRouter()

    @api.get("/server_info", response_model=None)
    async def server_info(request: Request) -> Any:
        fmt = request.query_params.get("config_format", "text")
        if fmt not in FORMATS:
            return _bad_format(fmt)
        config = _config_text(settings) if fmt == "text" else config_json(settings)
        return {"vllm_config": config, "vllm_env": {DEV_MODE_ENV: True}, "system_env": {}}

    return api


def config_json(settings: SimSettings) -> dict[str, Any]:
    """``vllm_config`` as vLLM's pydantic dump names it, for what saber-sim models."""
    return {
        "model_config": {
            "model": settings.model_name,
            "served_model_name": settings.model_name,
            "max_model_len": settings.max_model_len,
        },
        "scheduler_config": {
            "policy": settings.scheduling_policy,
            "max_num_seqs": settings.max_num_seqs,
            "max_num_batched_tokens": settings.max_num_batched_tokens,
            "enable_chunked_prefill": True,
        },
    }


def _config_text(settings: SimSettings) -> str:
    return (
        f"model={settings.model_name!r}, max_seq_len={settings.max_model_len}, "
        f"served_model_name={settings.model_name}, enable_chunked_prefill=True"
    )


def _bad_format(fmt: str) -> JSONResponse:
    """vLLM's answer to a query that fails validation: a 400 in its error shape."""
    detail = {
        "type": "literal_error",
        "loc": "query.config_format",
        "msg": "Input should be 'text' or 'json'",
        "input": fmt,
        "ctx": {"expected": "'text' or 'json'"},
    }
    body = wire.error_body(
        f"1 validation error:\n  {detail}",
        400,
        code=400,
        param="query.config_format",
        type="Bad Request",
    )
    return JSONResponse(body, status_code=400)
