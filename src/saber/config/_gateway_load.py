"""saber-gateway settings: a YAML file, ``SABER_*`` environment variables, CLI flags.

Precedence, highest first: command-line flags, environment variables, the file,
the defaults (``saber.config._gateway``'s models). Every leaf setting has an
environment variable named after its path: ``backend.url`` is ``SABER_BACKEND_URL``,
``window_size`` is ``SABER_WINDOW_SIZE``. Lists of strings take a comma-separated
value; mappings and lists of mappings (``tasks``, ``aliases``, ``rules``) take YAML
or JSON text.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import yaml
from pydantic import BaseModel

from saber.config._errors import ConfigError
from saber.config._gateway import GatewayConfig
from saber.config._tasks import DEFAULT_CONFIG_DIR, parse_tasks
from saber.config._yaml import read_yaml

ENV_PREFIX = "SABER_"
DEFAULT_GATEWAY_CONFIG = DEFAULT_CONFIG_DIR / "gateway.yaml"


# -- environment variables ------------------------------------------------------

EnvKind = Literal["scalar", "list", "yaml"]


def _env_kind(annotation: Any) -> EnvKind:
    """How an environment string becomes a value of this type."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation)
        options = (
            typing.get_args(item)
            if typing.get_origin(item) in (typing.Union, types.UnionType)
            else (item,)
        )
        plain = [typing.get_args(o)[0] if typing.get_origin(o) is Annotated else o for o in options]
        # Strings, or strings and objects (api_keys): comma-separated, or YAML from "[".
        return "list" if str in plain else "yaml"
    if origin is dict:
        return "yaml"
    return "scalar"


def _env_table(
    model: type[BaseModel], path: tuple[str, ...] = ()
) -> dict[str, tuple[tuple[str, ...], EnvKind]]:
    table: dict[str, tuple[tuple[str, ...], EnvKind]] = {}
    for name, field in model.model_fields.items():
        here = (*path, name)
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            table.update(_env_table(ann, here))
        else:
            table[ENV_PREFIX + "_".join(here).upper()] = (here, _env_kind(ann))
    return table


ENV_VARS: dict[str, tuple[tuple[str, ...], EnvKind]] = _env_table(GatewayConfig)
"""Every ``SABER_*`` variable the gateway reads, with the setting it overrides."""


def _env_value(name: str, raw: str, kind: EnvKind, nullable: bool) -> Any:
    if nullable and raw.strip().lower() in ("", "none", "null"):
        return None
    if kind == "list":
        text = raw.strip()
        if text.startswith("["):
            return _yaml_value(name, text)
        return [item.strip() for item in text.split(",") if item.strip()]
    if kind == "yaml":
        return _yaml_value(name, raw)
    return raw


def _yaml_value(name: str, raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"environment variable {name}: not valid YAML or JSON: {exc}") from None


def _nullable(path: tuple[str, ...]) -> bool:
    model: type[BaseModel] = GatewayConfig
    for part in path[:-1]:
        ann = model.model_fields[part].annotation
        assert isinstance(ann, type)
        model = ann
    field = model.model_fields[path[-1]]
    return type(None) in typing.get_args(field.annotation)


# -- loading ----------------------------------------------------------------------


def load_gateway_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> GatewayConfig:
    """Read the gateway settings: ``overrides`` (CLI, dotted keys) > ``env`` > the file.

    ``path`` None means the shipped configs/gateway.yaml; ``env`` None means
    ``os.environ``. A ConfigError names the source (file, variable or flag), the
    field and the problem.
    """
    env = os.environ if env is None else env
    path = Path(path) if path is not None else DEFAULT_GATEWAY_CONFIG
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: invalid configuration\n  (top level): expected a mapping of settings, "
            f"got {type(data).__name__}"
        )
    sources: dict[tuple[str, ...], str] = {}
    for name, (key, kind) in ENV_VARS.items():
        if name in env:
            _put(data, key, _env_value(name, env[name], kind, _nullable(key)))
            sources[key] = f"environment variable {name}"
    for dotted, value in (overrides or {}).items():
        key = tuple(dotted.split("."))
        _put(data, key, value)
        sources[key] = f"command-line option --{dotted.split('.')[-1].replace('_', '-')}"
    return _validate(data, path, sources)


def _put(data: dict[str, Any], key: tuple[str, ...], value: Any) -> None:
    node = data
    for part in key[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[key[-1]] = value


def _validate(
    data: dict[str, Any], path: Path, sources: Mapping[tuple[str, ...], str]
) -> GatewayConfig:
    data = dict(data)
    profile = data.get("profile")
    if ("profile",) not in sources and isinstance(profile, str) and not Path(profile).is_absolute():
        data["profile"] = path.parent / profile  # a path in the file is relative to the file
    backends = data.get("backends")
    if ("backends",) not in sources and isinstance(backends, list):
        data["backends"] = [_relative_profile(b, path) for b in backends]
    if "tasks" in data:
        where = sources.get(("tasks",)) or str(path)
        if data["tasks"] is None:
            raise ConfigError(f"{where}: invalid configuration\n  tasks: must not be empty")
        tasks = parse_tasks({"tasks": data["tasks"]}, where)
        data["tasks"] = tasks
    try:
        return GatewayConfig.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(_describe(path, exc, sources)) from None


def _relative_profile(entry: Any, path: Path) -> Any:
    """A backend's profile, named in the file by a relative path, is relative to the file."""
    if isinstance(entry, dict) and isinstance(entry.get("profile"), str):
        profile = Path(entry["profile"])
        if not profile.is_absolute():
            return {**entry, "profile": path.parent / profile}
    return entry


def _describe(
    path: Path, exc: pydantic.ValidationError, sources: Mapping[tuple[str, ...], str]
) -> str:
    lines = [f"{path}: invalid configuration"]
    for err in exc.errors():
        loc = tuple(str(part) for part in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        field = ".".join(loc) or "(top level)"
        if not loc and ": " in msg:  # a cross-field check names its own field
            field, msg = msg.split(": ", 1)
            loc = tuple(field.split("."))
        origin = next(
            (sources[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in sources), None
        )
        suffix = f" (from {origin})" if origin else ""
        lines.append(f"  {field}: {msg}{suffix}")
    return "\n".join(lines)
