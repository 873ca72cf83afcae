"""The one RFC 3339 / ISO 8601 time parser (docs/design/timeparse.md).

Every timestamp vkgate reads — Kubernetes ``metadata.creationTimestamp``, ``sinceTime``, Nomad's
nanosecond ``StartedAt``, Zun's ``2018-01-12 09:37:25+00:00``, Azure Batch's 7-digit fractions —
goes through ``parse_rfc3339`` (strict: ``ValueError`` naming the value) or ``parse_time``
(lenient: ``None`` for absent or unparsable values, for status mapping where a bad timestamp
must not crash the agent).  Both return an aware datetime in UTC:

* ``Z``/``z`` and numeric offsets (``+01:00``) are understood and converted to UTC;
* fractions of any length (Nomad's nanoseconds, Batch's 7 digits) are truncated to
  microseconds, Python's ``datetime`` has no finer unit;
* a value without a zone is UTC (``naive="utc"``, what the backends' APIs mean) or refused
  (``naive="reject"``, for input a client sent: the kubelet's ``sinceTime``).
"""

from __future__ import annotations

import datetime as _dt
from typing import Literal

__all__ = ["Naive", "parse_rfc3339", "parse_time"]

Naive = Literal["utc", "reject"]


def parse_rfc3339(value: str, *, naive: Naive = "utc") -> _dt.datetime:
    """An RFC 3339 / ISO 8601 timestamp as an aware UTC datetime; ``ValueError`` if invalid."""
    text = value.strip()
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    try:
        when = _dt.datetime.fromisoformat(text)  # any fraction length (truncated), offsets
    except ValueError:
        raise ValueError(f"invalid time {value!r}: expected RFC 3339") from None
    if when.tzinfo is None:
        if naive == "reject":
            raise ValueError(f"invalid time {value!r}: no time zone")
        return when.replace(tzinfo=_dt.UTC)
    return when.astimezone(_dt.UTC)


def parse_time(value: object, *, naive: Naive = "utc") -> _dt.datetime | None:
    """Like ``parse_rfc3339`` but ``None`` for a missing, empty or unparsable value; a
    ``datetime`` passes through (made aware UTC)."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            return None if naive == "reject" else value.replace(tzinfo=_dt.UTC)
        return value.astimezone(_dt.UTC)
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return parse_rfc3339(value, naive=naive)
    except ValueError:
        return None
