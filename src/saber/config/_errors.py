from __future__ import annotations

from pathlib import Path

import pydantic


class ConfigError(ValueError):
    """A configuration file is missing, unreadable or invalid.

    The message always names the file, and for validation errors the field and
    what is wrong with it, so an operator can fix it without reading code.
    """


def describe_validation_error(source: str | Path, exc: pydantic.ValidationError) -> str:
    lines = [f"{source}: invalid configuration"]
    for err in exc.errors():
        field = ".".join(str(part) for part in err["loc"]) or "(top level)"
        lines.append(f"  {field}: {err['msg']}")
    return "\n".join(lines)
