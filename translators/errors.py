"""The one HTTP-status ladder: how a backend's refused call becomes an error of the tree drawn in
translators/base.py.

Nomad, Zun and Azure Batch all speak HTTP, and most of their statuses mean the same thing, so
the rungs live here once, in this order::

    401, 403             → BackendAuthError
    404                  → BackendNotFound
    409                  → BackendConflict
    429                  → BackendThrottled(retry_after)
    503, when ``busy``   → BackendThrottled(retry_after)
    any other ≥ 500      → BackendUnavailable
    anything else        → ``otherwise(message, status)``

What really differs stays with each backend's one mapping function, which builds its own
message (its wording, its truncation), checks its own cases *before* the ladder and passes the
rest in:

* ``busy`` — when a 503 is the service asking to slow down rather than being down: Nomad when
  it sends a ``Retry-After`` header, Zun when that header parses, Batch when the error code in
  the body is empty or ``ServerBusy``.
* ``otherwise`` — what a remaining status (another 4xx, or a 3xx) is: Nomad rejects a 4xx
  (``reason="NomadRejected"``) and calls a 3xx unavailable, Zun keeps a plain ``BackendError``,
  Batch rejects with the Batch error code as the reason.
* its own cases — Nomad's ACL refusals (``Permission denied`` with what the endpoint ``needs``,
  an unknown token), its ``EnforceIndex`` conflicts and validation errors sent as 500
  (translators/nomad/errors.py); Zun's image-not-found at create, quota errors and refused
  microversions (translators/zun/client.py); Batch needs none (translators/batch/client.py).

Bodies never reach this module: the message is already short and free of request bodies.
"""

from __future__ import annotations

from collections.abc import Callable

from translators.base import (
    BackendAuthError,
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendThrottled,
    BackendUnavailable,
)

#: What a status the ladder has no rung for becomes: ``(message, status) → error``.
Otherwise = Callable[[str, int], BackendError]


def status_error(
    status: int,
    message: str,
    *,
    otherwise: Otherwise,
    retry_after: float | None = None,
    busy: bool = False,
) -> BackendError:
    """The error for a non-2xx answer ``status``, carrying ``message`` and ``status``
    (``retry_after``: seconds, from the answer's ``Retry-After``, for the throttled rungs)."""
    if status in (401, 403):
        return BackendAuthError(message, status=status)
    if status == 404:
        return BackendNotFound(message, status=status)
    if status == 409:
        return BackendConflict(message, status=status)
    if status == 429 or (status == 503 and busy):
        return BackendThrottled(message, status=status, retry_after=retry_after)
    if status >= 500:
        return BackendUnavailable(message, status=status)
    return otherwise(message, status)
