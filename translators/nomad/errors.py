"""The one place where a Nomad HTTP answer (or a failed connection) becomes a translator error.

Nomad's status codes are mostly honest (403 ACL, 404 unknown, 400 bad request, 429 rate
limit) with one wrinkle: many RPC errors surface as **500**, including job validation
failures ("1 error occurred: * Task group pod validation failed …").  Retrying those forever
would hide a broken template, so a 500 whose text looks like a validation error maps to
``BackendRejected`` (not retryable); every other 5xx is ``BackendUnavailable`` (retryable).

Bodies are truncated in messages; request bodies (which may hold env values) never are
included.
"""

from __future__ import annotations

import re

import httpx

from translators.base import (
    BackendAuthError,
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendRejected,
    BackendThrottled,
    BackendUnavailable,
)
from vkgate_core.retry import parse_retry_after as retry_after_seconds

MAX_BODY = 300
_VALIDATION = re.compile(
    r"validation failed|invalid|missing job|mismatched request|ambiguous|"
    r"unsupported|not allowed|must be|cannot be|can't",
    re.IGNORECASE,
)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_BODY else text[: MAX_BODY - 1] + "…"


def error_for_status(
    status: int, body: str, *, what: str, retry_after: str | None = None
) -> BackendError:
    """Map one non-2xx Nomad response to the translator error tree."""
    msg = f"nomad {what}: {status} {_short(body) or httpx.codes.get_reason_phrase(status)}"
    if status in (401, 403):
        return BackendAuthError(msg, status=status)
    if status == 404:
        return BackendNotFound(msg, status=status)
    if status == 409:
        return BackendConflict(msg, status=status)
    if status == 429:
        return BackendThrottled(msg, status=status, retry_after=retry_after_seconds(retry_after))
    if status == 503 and retry_after:
        return BackendThrottled(msg, status=status, retry_after=retry_after_seconds(retry_after))
    if 400 <= status < 500:
        return BackendRejected(msg, status=status, reason="NomadRejected")
    if status == 500 and _VALIDATION.search(body):
        return BackendRejected(msg, status=status, reason="NomadRejected")
    return BackendUnavailable(msg, status=status)


def error_for_transport(exc: httpx.HTTPError, *, what: str) -> BackendError:
    """A connection-level failure (refused, reset, timeout, TLS) → ``BackendUnavailable``."""
    kind = type(exc).__name__
    detail = str(exc) or kind
    try:  # name the address tried: the TOML address beats NOMAD_ADDR (docs/design/metrics.md)
        url = exc.request.url
        where = f" at {url.scheme}://{url.netloc.decode()}"
    except RuntimeError:  # no request attached (constructed by hand)
        where = ""
    return BackendUnavailable(f"nomad{where} {what}: {kind}: {_short(detail)}")
