"""What the Kubernetes API said, as exceptions — mapped in exactly one place.

Every non-2xx answer (and every failure to get an answer) becomes one of these, built by
``error_from_status`` (or ``error_from_transport`` for connection errors, which calls it)::

    GatewayError
    └── ApiError(status, reason, message, retry_after)
        ├── NotFound           404
        ├── Conflict           409  (reason AlreadyExists or Conflict)
        ├── Gone               410  (a watch/list resourceVersion is too old: relist)
        ├── Unauthorized       401
        ├── Forbidden          403
        ├── Invalid            422
        ├── TooManyRequests    429  (retryable, honours Retry-After)
        ├── ServerError        5xx  (retryable)
        └── ApiUnavailable     no HTTP answer: connection refused, TLS, timeout (status None)

``reason`` and ``message`` come from the ``Status`` body when the server sent one; otherwise the
message is the (truncated) body text, so a proxy's HTML error page never floods the log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.errors import GatewayError
from vkgate_core.retry import parse_retry_after

#: Longest body excerpt kept in an error message.
BODY_LIMIT = 300


class ApiError(GatewayError):
    """The API server refused a request (or could not be reached: ``status`` None)."""

    #: Safe to retry the same request after a delay.
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        prefix = f"{status} {reason}".strip() if status is not None else (reason or "")
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        #: The decoded ``Status`` object when the server sent one (``details.causes`` etc.).
        self.body: Mapping[str, Any] = body or {}


class NotLeader(ApiError):
    """A write was refused before it was sent: this instance does not hold the leader Lease
    (``KubeClient.fence``, docs/design/ha.md)."""


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class Gone(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class Invalid(ApiError):
    pass


class TooManyRequests(ApiError):
    retryable = True


class ServerError(ApiError):
    retryable = True


class ApiUnavailable(ApiError):
    retryable = True


_BY_STATUS: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def truncate(text: str, limit: int = BODY_LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_from_status(
    status: int,
    body: bytes | str | Mapping[str, Any] | None,
    *,
    retry_after: str | None = None,
    context: str = "",
) -> ApiError:
    """THE mapping: HTTP status (+ Status body, + Retry-After header) → exception.

    Also used for watch ``ERROR`` events, whose object is a ``Status`` with ``code``.
    """
    decoded: Mapping[str, Any] | None = None
    text = ""
    if isinstance(body, Mapping):
        decoded = body
    elif body:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            candidate = json.loads(text)
        except ValueError:
            candidate = None
        if isinstance(candidate, dict):
            decoded = candidate
    reason = ""
    message = ""
    after = parse_retry_after(retry_after)
    if decoded is not None and decoded.get("kind") == "Status":
        reason = str(decoded.get("reason") or "")
        message = str(decoded.get("message") or "")
        details = decoded.get("details") or {}
        if after is None and isinstance(details, Mapping) and details.get("retryAfterSeconds"):
            after = float(details["retryAfterSeconds"])
    elif decoded is not None:
        message = truncate(json.dumps(decoded))
    else:
        message = truncate(text) if text else "(empty response body)"
    if context:
        message = f"{context}: {message}"
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else ApiError
    return cls(message, status=status, reason=reason, retry_after=after, body=decoded)


def error_from_transport(exc: Exception, *, context: str = "") -> ApiUnavailable:
    """A request that got no HTTP answer (refused, reset, TLS failure, timeout)."""
    what = type(exc).__name__
    detail = truncate(str(exc)) or what
    message = f"{context}: {what}: {detail}" if context else f"{what}: {detail}"
    return ApiUnavailable(message, reason=what)
