"""Structured logs: one JSON object per line, and one line per request."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

REQUEST_LOGGER = "saber.gateway.requests"
GATEWAY_LOGGER = "saber.gateway"

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """A record as one JSON line: time, level, logger, message and any extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


def configure(level: str = "info", stream: Any = None) -> None:
    """Send the gateway's loggers to ``stream`` (stderr) as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger(GATEWAY_LOGGER)
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def log_request(fields: dict[str, Any]) -> None:
    """The one line per request: task, outcome, wait, tokens, latency and the rest."""
    logging.getLogger(REQUEST_LOGGER).info("request", extra=fields)
