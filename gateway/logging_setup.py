"""Logging: human text for terminals, one JSON object per line for log pipelines.

``log.format = "json"`` emits ``{"time", "level", "logger", "message", ...extra}``; an exception
adds ``"exc"``.  httpx/httpcore log every request at INFO, which would drown the agent's own
lines, so httpx is held at WARNING unless the level is debug and httpcore's wire-level
chatter always is.

Secrets never reach a log line at any level (docs/design/secrets.md).  The places that handle
them log none, the ``websockets`` client (which logs every frame at debug, the Nomad exec
handshake carries the ACL token) is held at INFO, and as a last line of defence every record
passes ``RedactFilter``, which masks the value after a credential-looking key
(``X-Nomad-Token: …``, ``"auth_token": "…"``, ``Authorization: Bearer …``).
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import json
import logging
import re
import sys
from typing import Any, TextIO

#: The virtual node the current task works for, when one process serves several
#: (docs/design/multinode.md): set in each node's context, inherited by every task it starts.
NODE: contextvars.ContextVar[str] = contextvars.ContextVar("vkgate_node", default="")

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


_CREDENTIAL = re.compile(
    r"""(?ix)
    (["']?\b(?:x-nomad-token|x-auth-token|auth_token|authorization|password|secret_key
        |account_key|api_key|private_key)["']?\s*[:=]\s*)
    (?:bearer\s+|basic\s+|sharedkey\s+)?
    ("[^"]*"|'[^']*'|[^\s,;}\]]+)
    """
)


def redact(text: str) -> str:
    """``text`` with the value after every credential-looking key replaced by ``*****``."""
    return _CREDENTIAL.sub(lambda m: m.group(1) + "*****", text)


class RedactFilter(logging.Filter):
    """Masks credentials in a record's message (after %-formatting) and exception text."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is the formatter's problem, not ours
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            if redact(text) != text:
                record.exc_text = redact(text)
                record.exc_info = None
        return True


class NodeFilter(logging.Filter):
    """Tags a record with ``NODE`` (the ``node`` field in JSON, ``name [node]:`` in text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        node = getattr(record, "node", None) or NODE.get()
        if node and not hasattr(record, "node"):
            record.node = node
        record._node_prefix = f" [{node}]" if node else ""
        return True


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
        elif record.exc_text:
            out["exc"] = record.exc_text
        return json.dumps(out, ensure_ascii=False)


def setup_logging(level: str = "info", fmt: str = "text", *, stream: TextIO | None = None) -> None:
    """Configure the root logger (idempotent: replaces handlers set by an earlier call)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(name)s%(_node_prefix)s: %(message)s")
        )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler.addFilter(RedactFilter())
    handler.addFilter(NodeFilter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx: one INFO line per request, useful only when debugging; httpcore: wire-level noise.
    logging.getLogger("httpx").setLevel(
        logging.INFO if level.lower() == "debug" else logging.WARNING
    )
    for name in ("httpcore", "asyncio"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("websockets").setLevel(logging.INFO)
