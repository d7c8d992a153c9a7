"""saber-gateway's settings as models: every setting, its default and its checks.

Where the values come from (the file, ``SABER_*`` environment variables, flags) is
``saber.config._gateway_load``; the names of the variables are derived from these
models, so a new field has its variable without more code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from saber.config._gateway_sections import ClusterSettings, PassthroughSettings, RefitSettings
from saber.config._slo import SloBounds
from saber.config._tasks import DEFAULT_PROFILE_DIR, Name, TaskType, load_tasks

MIN_METRICS_INTERVAL_S = 0.1
DEFAULT_PROFILE_NAME = "saber-sim-paper.json"
"""The profile used when none is configured: the one shipped for saber-sim's paper preset."""

Endpoint = Literal["chat", "completions", "any"]
BackendKindSetting = Literal["auto", "vllm", "llamacpp", "sim"]
"""``auto``: detected at start-up; the others are ``saber.backend.BackendKind``'s values."""
ForwardPrioritySetting = bool | Literal["auto"]
"""``auto``: on where the engine says it schedules by priority (docs/gateway.md)."""


class BackendSettings(BaseModel):
    """The one OpenAI-compatible server (vLLM) the gateway relays to."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(default="http://127.0.0.1:8000", description="base URL, without /v1")
    kind: BackendKindSetting = Field(
        default="auto", description="the engine: vllm, llamacpp, sim; auto (or null): detected"
    )
    metrics_interval_s: float | None = Field(
        default=1.0,
        ge=0,
        description="how often the backend's /metrics is read for its load (and vLLM's time "
        "to first token); 0 or null: never",
    )
    api_key: str | None = Field(default=None, description="sent upstream as a bearer token")
    model: str | None = Field(
        default=None, description="served model name for aliases; default: asked from /v1/models"
    )
    tokenize: bool = Field(
        default=False,
        description="ask the backend's /tokenize for each prompt's exact token count "
        "(vLLM; llama.cpp for completions), where a round trip is cheap; false: "
        "estimated from its bytes, at a ratio learned from usage.prompt_tokens",
    )
    connect_timeout_s: float = Field(default=2.0, gt=0)
    read_timeout_s: float = Field(default=600.0, gt=0, description="longest silence upstream")
    max_connections: int = Field(default=1024, ge=1)
    forward_priority: ForwardPrioritySetting = Field(
        default=False,
        description="send the admission tier as vLLM's request priority (0 on time, 1 "
        "demoted); for vllm serve --scheduling-policy priority. auto: only where the "
        "engine says it runs that policy (vLLM's /server_info, with VLLM_SERVER_DEV_MODE=1)",
    )
    transport: Literal["httpx", "aiohttp"] = Field(
        default="aiohttp",
        description="aiohttp under the httpx API (httpx-aiohttp), or httpx's own pool; "
        "see bench/upstream_client.py for why aiohttp is the default",
    )
    eject_after: int = Field(
        default=3,
        ge=1,
        description="of several backends, one that fails this many requests in a row "
        "(unreachable, 5xx) is ejected: nothing new is placed there",
    )
    eject_s: float = Field(
        default=10.0,
        gt=0,
        description="how long an ejected backend rests before one probe of /health "
        "decides whether it serves again (each failed probe doubles it, up to 8x)",
    )

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, kind: object) -> object:
        """Null, like ``none`` or an empty value in the environment, means ``auto``."""
        if isinstance(kind, str):
            kind = kind.strip().lower()
        return "auto" if kind in (None, "", "none", "null") else kind

    @field_validator("forward_priority", mode="before")
    @classmethod
    def _forward_priority(cls, value: object) -> object:
        return _forward_priority(value)

    @field_validator("metrics_interval_s")
    @classmethod
    def _interval(cls, interval: float | None) -> float | None:
        if interval is not None and 0 < interval < MIN_METRICS_INTERVAL_S:
            raise ValueError(f"must be 0 (off) or at least {MIN_METRICS_INTERVAL_S} s")
        return interval

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return backend_url(url)


_BOOL_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "1", "0", "t", "f", "y", "n"})
"""The strings pydantic reads as a boolean (an environment variable's, a flag's)."""


def _forward_priority(value: object) -> object:
    """``auto`` or a boolean (a word in any case, or YAML's true, 1, 0...); else one clear
    error rather than pydantic's two (one per member of the union)."""
    word = str(value).strip().lower() if isinstance(value, str | int) else None
    if word is not None and (word == "auto" or word in _BOOL_WORDS):
        return word
    raise ValueError(f"expected true, false or auto, got {value!r}")


def backend_url(url: str) -> str:
    """A backend's base URL, checked, without a trailing / or /v1."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL, got {url!r}")
    if parts.query or parts.fragment:
        raise ValueError("the backend URL must not carry a query or a fragment")
    return url.rstrip("/").removesuffix("/v1")


BackendName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")]


class BackendEntry(BaseModel):
    """One backend of several: where it is, and what differs from ``backend``'s settings
    (which every backend shares)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="base URL, without /v1")
    name: BackendName | None = Field(
        default=None, description="what metrics and logs call it; default: host:port"
    )
    profile: Path | None = Field(
        default=None, description="its speed profile; default: the gateway's 'profile'"
    )
    kind: BackendKindSetting | None = None
    api_key: str | None = None
    model: str | None = None
    forward_priority: ForwardPrioritySetting | None = None

    @field_validator("forward_priority", mode="before")
    @classmethod
    def _forward_priority(cls, value: object) -> object:
        return None if value is None else _forward_priority(value)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return backend_url(url)


class Backend(BaseModel):
    """One backend as the gateway serves it: its name, its settings, its profile."""

    model_config = ConfigDict(frozen=True)

    name: str
    settings: BackendSettings
    profile: Path | None


class AliasTarget(BaseModel):
    """A model name clients may send, standing for a task type (and a real model)."""

    model_config = ConfigDict(extra="forbid")

    task: Name
    model: str | None = Field(default=None, description="default: the backend's model")


class TaskRule(BaseModel):
    """Picks a task type from the request itself when no header or alias named one.

    A rule matches when every condition it sets holds; the first match wins.
    """

    model_config = ConfigDict(extra="forbid")

    task: Name
    endpoint: Endpoint = "any"
    max_tokens_at_most: int | None = Field(default=None, ge=0)
    fim: bool | None = Field(
        default=None,
        description="true: only fill-in-the-middle requests (a suffix, or a code model's "
        "FIM markers in the prompt); false: only others; absent: either",
    )


KeyName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class ApiKey(BaseModel):
    """A client key with a name (what metrics and logs show) and what it may do."""

    model_config = ConfigDict(extra="forbid")

    name: KeyName | None = Field(default=None, description="default: key<N>, its position")
    key: Annotated[SecretStr, Field(min_length=1)]
    tasks: list[Name] = Field(
        default_factory=list, description="the task types it may use; empty: all"
    )
    default_task: Name | None = Field(
        default=None, description="its task when the request names none it may use"
    )
    max_tokens: int | None = Field(default=None, ge=1, description="a cap on max_tokens")
    slo_bounds: SloBounds | None = Field(
        default=None,
        description="the limits its requests may state for themselves (x-slo-*-ms), in "
        "place of each task's slo_bounds",
    )


class GatewayConfig(BaseModel):
    """Everything saber-gateway needs to serve; see configs/gateway.yaml."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    backend: BackendSettings = Field(default_factory=BackendSettings)
    backends: list[BackendEntry] = Field(
        default_factory=list,
        description="several backends (replicas), each with what differs from 'backend'; "
        "empty: the one backend at backend.url",
    )
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    profile: Path | None = Field(default=None, description=f"default: {DEFAULT_PROFILE_NAME}")
    policy: Literal["closed-loop", "paper", "mean"] = Field(
        default="closed-loop",
        description="closed-loop: the default, measured best across the engine matrix "
        "(docs/admission.md); paper: Algorithm 1 as published; mean: the previous default. "
        "The knobs below, when set, override the policy's",
    )
    window_size: int | None = Field(default=None, ge=1)
    order: Literal["random", "deadline"] | None = None
    protection: Literal["frozen", "none"] | None = None
    lpq: Literal["paper", "idle"] | None = None
    calibrate: bool | None = None
    learn_lengths: bool | None = None
    condition_lengths: bool | None = None
    prefill: bool | None = None
    decide: Literal["mean", "chance"] | None = None
    demote_below: float | None = Field(default=None, ge=0.0, lt=1.0)
    refuse_below: float | None = Field(default=None, ge=0.0, lt=1.0)
    late_value: float | None = Field(default=None, ge=0.0, lt=1.0)
    future_weight: float | None = Field(default=None, ge=0.0, le=1.0)
    max_concurrency: int | None = Field(
        default=256, ge=1, description="most sequences at the backend (n x prompts of each)"
    )
    max_sequences_per_request: int | None = Field(
        default=None,
        ge=1,
        description="most sequences one request may run (n, or best_of, x its prompts); "
        "past it, 400. Default: max_concurrency",
    )
    queue_cap: int | None = Field(default=256, ge=0, description="per task type, HPQ + LPQ")
    refit: RefitSettings = Field(default_factory=RefitSettings)
    passthrough: PassthroughSettings = Field(default_factory=PassthroughSettings)
    state_file: Path | None = Field(
        default=None,
        description="learned lengths, calibration and live curve, kept across restarts",
    )
    api_keys: list[Annotated[str, Field(min_length=1)] | ApiKey] = Field(default_factory=list)
    metrics_keys: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="bearer tokens that may read /metrics besides api_keys"
    )
    metrics_public: bool = Field(default=False, description="/metrics needs no key")
    task_max_tokens: Literal["clamp", "reject", "off"] = Field(
        default="clamp",
        description="a request above its cap (the task's, when the client named the task by "
        "header or <model>:<task>; its key's): lowered to it, refused with 400, or let through",
    )
    tasks: dict[str, TaskType] = Field(default_factory=lambda: load_tasks())
    default_task: str = "code_generation"
    aliases: dict[Annotated[str, Field(min_length=1)], AliasTarget] = Field(default_factory=dict)
    rules: list[TaskRule] = Field(default_factory=list)
    queued_comment_interval_s: float = Field(default=3.0, gt=0)
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="a request's headers must arrive within this"
    )
    body_timeout_s: float = Field(
        default=60.0, gt=0, description="a request's body must arrive within this"
    )
    max_client_connections: int = Field(
        default=1024, ge=1, description="open client connections; past it, 503 and close"
    )
    drain_timeout_s: float = Field(
        default=30.0, ge=0, description="on SIGTERM, how long running requests may finish"
    )
    reload_interval_s: float = Field(
        default=0.0, ge=0, description="how often the files are checked for a change; 0: never"
    )
    seed: int | None = Field(default=None, description="the scheduler's random window")
    log_requests: bool = True

    @model_validator(mode="after")
    def _tasks_exist(self) -> GatewayConfig:
        known = set(self.tasks)

        def check(field: str, task: str) -> None:
            if task not in known:
                raise ValueError(
                    f"{field}: unknown task type {task!r}; known: {', '.join(sorted(known))}"
                )

        limit, cap = self.max_sequences_per_request, self.max_concurrency
        if limit is not None and cap is not None and limit > cap:
            raise ValueError(
                f"max_sequences_per_request: {limit} is above max_concurrency ({cap}); one "
                "request could never run"
            )
        check("default_task", self.default_task)
        seen: set[str] = set()
        for i, backend in enumerate(self.backend_list()):
            if backend.name in seen:
                raise ValueError(f"backends.{i}.name: {backend.name!r} is used twice")
            seen.add(backend.name)
        for alias, target in self.aliases.items():
            check(f"aliases.{alias}.task", target.task)
        for i, rule in enumerate(self.rules):
            check(f"rules.{i}.task", rule.task)
        names: set[str] = set()
        secrets: set[str] = set()
        for i, key in enumerate(self.client_keys()):
            where = f"api_keys.{i}"
            for task in key.tasks:
                check(f"{where}.tasks", task)
            if key.default_task is not None:
                check(f"{where}.default_task", key.default_task)
                if key.tasks and key.default_task not in key.tasks:
                    raise ValueError(f"{where}.default_task: not one of the key's tasks")
            if key.name in names:
                raise ValueError(f"{where}.name: {key.name!r} is used twice")
            secret = key.key.get_secret_value()
            if secret in secrets:
                raise ValueError(f"{where}.key: the same key is listed twice")
            names.add(key.name or "")
            secrets.add(secret)
        return self

    def client_keys(self) -> list[ApiKey]:
        """``api_keys`` as objects, each named (``key1``, ``key2``... by position)."""
        return [
            ApiKey(name=f"key{i}", key=SecretStr(k))
            if isinstance(k, str)
            else (k if k.name else k.model_copy(update={"name": f"key{i}"}))
            for i, k in enumerate(self.api_keys, start=1)
        ]

    def backend_list(self) -> list[Backend]:
        """The backends served: each of ``backends`` on ``backend``'s settings, else the
        one at ``backend.url``. Unnamed, a backend is called by its host:port."""
        entries = self.backends or [BackendEntry(url=self.backend.url)]
        out = []
        for entry in entries:
            fields = entry.model_dump(exclude={"name", "profile"}, exclude_none=True)
            settings = BackendSettings.model_validate({**self.backend.model_dump(), **fields})
            name = entry.name or (urlsplit(settings.url).netloc or settings.url)
            out.append(Backend(name=name, settings=settings, profile=entry.profile))
        return out

    def sequence_limit(self) -> int | None:
        """The most sequences one request may run: ``max_sequences_per_request``, else
        ``max_concurrency`` (None: no limit)."""
        if self.max_sequences_per_request is not None:
            return self.max_sequences_per_request
        return self.max_concurrency

    def profile_path(self) -> Path:
        """The profile to load: the configured one, else the shipped default."""
        return (
            self.profile if self.profile is not None else DEFAULT_PROFILE_DIR / DEFAULT_PROFILE_NAME
        )
