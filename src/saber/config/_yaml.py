from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml

from saber.config._errors import ConfigError, describe_validation_error

M = TypeVar("M", bound=pydantic.BaseModel)


def read_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read file ({exc.strerror or exc})") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc


def validate(model: type[M], data: Any, source: str | Path) -> M:
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(describe_validation_error(source, exc)) from exc
