"""One log layout for all three commands: text for people, or one JSON object per line for pipelines.

JSON records carry ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message``, ``exception`` when
there is a traceback, and any structured extras passed with ``extra={...}`` as top-level fields.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
# Every package of the project logs below one of these names.
PROJECT_LOGGERS = ("common", "exporter", "analyzer", "reaper", "simulation", "cli")

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


def _rfc3339(moment: datetime) -> str:
    # Imported when a JSON line is written: common.timeutil loads pydantic, which every command's
    # --help would otherwise pay for (docs/architecture.md, "Start-up time").
    from common.timeutil import rfc3339

    return rfc3339(moment)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": _rfc3339(datetime.fromtimestamp(record.created, tz=UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value if isinstance(value, str | int | float | bool | type(None)) else str(value)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def configure(
    fmt: str = "text",
    level: int = logging.INFO,
    stream: TextIO | None = None,
    loggers: Sequence[str] = PROJECT_LOGGERS,
) -> logging.Handler:
    """Send the project's logs to stderr; returns the handler so callers (tests, the demo) can remove it.

    Only the project's own loggers are configured, so a library's chatter keeps its own level.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    for name in loggers:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.addHandler(handler)
    return handler


def unconfigure(handler: logging.Handler, loggers: Sequence[str] = PROJECT_LOGGERS) -> None:
    for name in loggers:
        logging.getLogger(name).removeHandler(handler)
