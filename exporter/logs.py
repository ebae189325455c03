"""Logging setup: human-readable text, or one JSON object per line for log pipelines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg"}`` plus ``exc`` when there is a traceback; UTC timestamps."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(log_format: str, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
