"""The one HTTP-status ladder every backend maps its refused calls through (translators/errors.py):
each status lands on its rung, with the message, the status and the Retry-After it was given;
a status without a rung is the backend's own ``otherwise``."""

from __future__ import annotations

import pytest

from translators import base
from translators.errors import status_error


def _rejected(message: str, status: int) -> base.BackendError:
    return base.BackendRejected(message, status=status, reason="Otherwise")


@pytest.mark.parametrize(
    ("status", "busy", "kind"),
    [
        (401, False, base.BackendAuthError),
        (403, False, base.BackendAuthError),
        (403, True, base.BackendAuthError),
        (404, False, base.BackendNotFound),
        (409, False, base.BackendConflict),
        (429, False, base.BackendThrottled),
        (429, True, base.BackendThrottled),
        (503, True, base.BackendThrottled),
        (503, False, base.BackendUnavailable),
        (500, True, base.BackendUnavailable),
        (500, False, base.BackendUnavailable),
        (502, False, base.BackendUnavailable),
        (504, True, base.BackendUnavailable),
        (599, False, base.BackendUnavailable),
        (400, False, base.BackendRejected),
        (405, False, base.BackendRejected),
        (410, True, base.BackendRejected),
        (413, False, base.BackendRejected),
        (422, False, base.BackendRejected),
        (301, False, base.BackendRejected),
    ],
)
def test_each_status_lands_on_its_rung(status: int, busy: bool, kind: type) -> None:
    err = status_error(status, "backend GET /x: refused", otherwise=_rejected, busy=busy)
    assert type(err) is kind
    assert str(err) == "backend GET /x: refused"
    assert err.status == status
    if kind is base.BackendRejected:
        assert isinstance(err, base.BackendRejected) and err.reason == "Otherwise"


@pytest.mark.parametrize(("status", "busy"), [(429, False), (429, True), (503, True)])
@pytest.mark.parametrize("retry_after", [None, 0.0, 12.5])
def test_throttled_rungs_carry_retry_after(
    status: int, busy: bool, retry_after: float | None
) -> None:
    err = status_error(status, "m", otherwise=_rejected, retry_after=retry_after, busy=busy)
    assert isinstance(err, base.BackendThrottled)
    assert err.retry_after == retry_after


@pytest.mark.parametrize("status", [300, 400, 405, 418, 422])
def test_otherwise_gets_the_message_and_the_status(status: int) -> None:
    seen: list[tuple[str, int]] = []

    def otherwise(message: str, st: int) -> base.BackendError:
        seen.append((message, st))
        return base.BackendError(message, status=st)

    err = status_error(status, "msg", otherwise=otherwise, retry_after=3.0, busy=True)
    assert seen == [("msg", status)]
    assert type(err) is base.BackendError and err.status == status


@pytest.mark.parametrize("status", [401, 403, 404, 409, 429, 500, 503])
def test_otherwise_is_not_asked_for_a_status_with_a_rung(status: int) -> None:
    def otherwise(message: str, st: int) -> base.BackendError:
        raise AssertionError(f"asked for {st}")

    status_error(status, "msg", otherwise=otherwise)


def test_retryable_follows_the_rung() -> None:
    """Auth, conflict, throttled and unavailable are retried; not found and rejected are not."""
    retryable = {
        status: status_error(status, "m", otherwise=_rejected, busy=True).retryable
        for status in (401, 404, 409, 429, 503, 500, 400)
    }
    assert retryable == {
        401: True,
        404: False,
        409: True,
        429: True,
        503: True,
        500: True,
        400: False,
    }
