"""HTTP helpers shared by every client (the Kubernetes client and each backend's).

One ``Retry-After`` parser for all of them, so throttling is honoured the same way everywhere.
"""

from __future__ import annotations

import datetime as _dt
import email.utils


def parse_retry_after(value: str | None, *, now: _dt.datetime | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date (RFC 9110 §10.2.3).

    None when the header is absent or unparsable; never negative.
    """
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return max(0.0, (when - (now or _dt.datetime.now(_dt.UTC))).total_seconds())
