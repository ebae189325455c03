"""Logging for a CronJob: text for people, or one JSON object per line for log pipelines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from analyzer.timeutil import rfc3339

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": rfc3339(datetime.fromtimestamp(record.created, tz=UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        # Structured extras passed with `extra={...}` become top-level fields.
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value if isinstance(value, str | int | float | bool | type(None)) else str(value)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def configure(fmt: str = "text", level: int = logging.INFO, stream: TextIO | None = None) -> logging.Handler:
    """Send the reaper's (and the analyzer's) logs to stderr; returns the handler so callers can remove it."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    for name in ("reaper", "analyzer"):
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.addHandler(handler)
    return handler


def unconfigure(handler: logging.Handler) -> None:
    for name in ("reaper", "analyzer"):
        logging.getLogger(name).removeHandler(handler)
