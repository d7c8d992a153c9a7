"""Which engine serves at a URL: vLLM, llama.cpp's llama-server, or saber-sim.

The probes, in order; the first that decides wins:

1. ``GET /version``. saber-sim answers ``{"version": ..., "engine": "saber-sim"}``:
   SIM. It must come first, because everything else saber-sim says is vLLM's
   (its model cards are ``owned_by: "vllm"``, its metrics are ``vllm:*``).
   vLLM answers ``{"version": "0.32.0"}``, which is kept as a hint (step 4);
   llama-server has no ``/version`` (404).
2. ``GET /v1/models``: a card ``owned_by: "llamacpp"`` is LLAMACPP, one
   ``owned_by: "vllm"`` is VLLM. The most direct statement either engine makes,
   and it needs no optional flag.
3. ``GET /props``: llama-server's, with ``build_info``: LLAMACPP.
4. A ``/version`` with a version string (step 1): VLLM.
5. ``GET /metrics``: ``vllm:`` series are VLLM, ``llamacpp:`` series are
   LLAMACPP (llama-server exports them only with ``--metrics``).

If none decides, BackendError; if the backend cannot be reached or breaks off
at any step, BackendError at once (the caller retries later). A probe that is
answered with an error status or with something unexpected is only a probe
that did not decide. The client passed in carries any auth header the backend
needs (vLLM's ``--api-key`` guards only ``/v1``; llama-server's guards more).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from saber.backend._http import error_detail, get, json_body
from saber.backend._kind import BackendError, BackendInfo, BackendKind

SIM_ENGINE = "saber-sim"
"""The ``engine`` field of saber-sim's ``/version``."""

_OWNERS = {"llamacpp": BackendKind.LLAMACPP, "vllm": BackendKind.VLLM}


@dataclass
class _Seen:
    """What the probes found, so that ``describe`` does not ask twice."""

    version: str | None = None  # /version's
    build_info: str | None = None  # /props'
    models: list[str] | None = None
    notes: list[str] = field(default_factory=list)


async def detect_kind(client: httpx.AsyncClient, base_url: str) -> BackendKind:
    """The engine at ``base_url`` (without ``/v1``); BackendError if unreachable or unknown."""
    kind, _ = await _identify(client, base_url.rstrip("/"))
    return kind


async def describe(
    client: httpx.AsyncClient, base_url: str, kind: BackendKind | None = None
) -> BackendInfo:
    """Engine, version and model ids. ``kind`` None: detected first.

    The version is vLLM's (or saber's, for saber-sim) from ``/version``, and
    llama-server's ``build_info`` from ``/props``; None when not said. BackendError
    if the backend is unreachable, or its ``/v1/models`` is unusable.
    """
    base = base_url.rstrip("/")
    if kind is None:
        kind, seen = await _identify(client, base)
    else:
        seen = _Seen()
    if kind is BackendKind.LLAMACPP:
        if seen.build_info is None:
            props = json_body(await get(client, base + "/props"))
            seen.build_info = _text(props, "build_info")
        version = seen.build_info
    else:
        if seen.version is None:
            seen.version = _text(json_body(await get(client, base + "/version")), "version")
        version = seen.version
    if seen.models is None:
        url = base + "/v1/models"
        resp = await get(client, url)
        seen.models = _model_ids(json_body(resp))
        if seen.models is None:
            raise BackendError(
                f"GET {url} answered {resp.status_code} without a model list: {error_detail(resp)}"
            )
    return BackendInfo(kind=kind, version=version, models=seen.models)


async def _identify(client: httpx.AsyncClient, base: str) -> tuple[BackendKind, _Seen]:
    seen = _Seen()

    version = json_body(await get(client, base + "/version"))
    if isinstance(version, dict) and version.get("engine") == SIM_ENGINE:
        seen.version = _text(version, "version")
        return BackendKind.SIM, seen
    seen.version = _text(version, "version")
    seen.notes.append(f"/version: {seen.version or 'none'}")

    models = json_body(await get(client, base + "/v1/models"))
    seen.models = _model_ids(models)
    owners = _owners(models)
    for owner, kind in _OWNERS.items():
        if owner in owners:
            return kind, seen
    seen.notes.append(f"/v1/models owned_by: {', '.join(sorted(owners)) or 'none'}")

    props = json_body(await get(client, base + "/props"))
    seen.build_info = _text(props, "build_info")
    if seen.build_info is not None:
        return BackendKind.LLAMACPP, seen
    seen.notes.append("/props: no build_info")

    if seen.version is not None:
        return BackendKind.VLLM, seen

    resp = await get(client, base + "/metrics")
    text = resp.text if resp.status_code == 200 else ""
    if "\nvllm:" in text or text.startswith("vllm:"):
        return BackendKind.VLLM, seen
    if "\nllamacpp:" in text or text.startswith("llamacpp:"):
        return BackendKind.LLAMACPP, seen
    seen.notes.append(f"/metrics: {resp.status_code}, no vllm: or llamacpp: series")
    raise BackendError(
        f"cannot tell which engine serves {base} (vLLM, llama.cpp or saber-sim): "
        + "; ".join(seen.notes)
    )


def _text(obj: Any, key: str) -> str | None:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, str) and value else None


def _cards(models: Any) -> list[dict[str, Any]]:
    data = models.get("data") if isinstance(models, dict) else None
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []


def _model_ids(models: Any) -> list[str] | None:
    if not isinstance(models, dict) or not isinstance(models.get("data"), list):
        return None
    return [m["id"] for m in _cards(models) if isinstance(m.get("id"), str)]


def _owners(models: Any) -> set[str]:
    return {m["owned_by"] for m in _cards(models) if isinstance(m.get("owned_by"), str)}
