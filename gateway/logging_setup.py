"""Logging: human text for terminals, one JSON object per line for log pipelines.

``log.format = "json"`` emits ``{"time", "level", "logger", "message", ...extra}``; an exception
adds ``"exc"``.  httpx/httpcore log every request at INFO, which would drown the agent's own
lines, so httpx is held at WARNING unless the level is debug and httpcore's wire-level
chatter always is.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import sys
from typing import Any, TextIO

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _dt.datetime.fromtimestamp(record.created, _dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = (
                    value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
                )
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def setup_logging(level: str = "info", fmt: str = "text", *, stream: TextIO | None = None) -> None:
    """Configure the root logger (idempotent: replaces handlers set by an earlier call)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx: one INFO line per request, useful only when debugging; httpcore: wire-level noise.
    logging.getLogger("httpx").setLevel(
        logging.INFO if level.lower() == "debug" else logging.WARNING
    )
    for name in ("httpcore", "asyncio"):
        logging.getLogger(name).setLevel(logging.WARNING)
