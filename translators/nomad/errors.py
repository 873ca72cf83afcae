"""The one place where a Nomad HTTP answer (or a failed connection) becomes a translator error.

Nomad's status codes are mostly honest (403 ACL, 404 unknown, 400 bad request, 429 rate
limit): those rungs are the one ladder every backend shares (translators/errors.py), and
this module adds only Nomad's own cases before it.  One wrinkle: many RPC errors surface as **500**, including job validation
failures ("1 error occurred: * Task group pod validation failed …").  Retrying those forever
would hide a broken template, so a 500 whose text looks like a validation error maps to
``BackendRejected`` (not retryable); every other 5xx is ``BackendUnavailable`` (retryable).

Bodies are truncated in messages; request bodies (which may hold env values) never are
included.

``Permission denied`` is an ACL refusal whatever the status: Nomad answers 403 on plain calls
but 500 on the event stream (the error travels inside the stream's RPC; docs/design/nomad.md,
"ACL").  Either way it is a ``BackendAuthError`` naming what the endpoint needs (``needs``, from
``acl.py``), never a ``BackendUnavailable`` to retry as if it were transient.

A TLS failure (wrong CA, no client certificate, name mismatch) is one line naming the address
and the TLS error (``tls_problem``), e.g. ``nomad https://127.0.0.1:4646: TLS: certificate
verify failed: unable to get local issuer certificate``.
"""

from __future__ import annotations

import re
import ssl

import httpx

from translators.base import (
    BackendAuthError,
    BackendConflict,
    BackendError,
    BackendRejected,
    BackendUnavailable,
)
from translators.errors import status_error
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


#: Nomad's words when a register's ``EnforceIndex`` check fails ("… 0: job already exists").
ENFORCE_INDEX = "Enforcing job modify index"
PERMISSION_DENIED = "Permission denied"
TOKEN_NOT_FOUND = "ACL token not found"


def error_for_status(
    status: int, body: str, *, what: str, retry_after: str | None = None, needs: str = ""
) -> BackendError:
    """Map one non-2xx Nomad response to the translator error tree (``needs``: what the
    endpoint requires, added to a ``Permission denied``): Nomad's own cases, then the one
    ladder of translators/errors.py."""
    msg = f"nomad {what}: {status} {_short(body) or httpx.codes.get_reason_phrase(status)}"
    text = body.strip()
    if text.endswith(PERMISSION_DENIED):
        return BackendAuthError(f"{msg} ({needs})" if needs else msg, status=status)
    if text.endswith(TOKEN_NOT_FOUND):
        return BackendAuthError(
            f"{msg} (the token, backend.nomad.token or NOMAD_TOKEN, is unknown to this region)",
            status=status,
        )
    # A register with EnforceIndex met another job version (a 500); a 401/403 stays an ACL error.
    if ENFORCE_INDEX in text and status not in (401, 403):
        return BackendConflict(msg, status=status)
    if status == 500 and _VALIDATION.search(body):
        return BackendRejected(msg, status=status, reason="NomadRejected")
    return status_error(
        status,
        msg,
        otherwise=_refused,
        retry_after=retry_after_seconds(retry_after),
        busy=bool(retry_after),
    )


def _refused(msg: str, status: int) -> BackendError:
    """A 4xx the ladder has no rung for is a request Nomad will not take; a 3xx is not Nomad."""
    if 400 <= status < 500:
        return BackendRejected(msg, status=status, reason="NomadRejected")
    return BackendUnavailable(msg, status=status)


_SSL_TAG = re.compile(r"^\[SSL(?:: [A-Z0-9_]+)?\] |\s*\(_ssl\.c:\d+\)$")
#: OpenSSL reasons → what to check (one hint each).
_TLS_HINTS = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the server wants a client certificate: client_cert"
    " and client_key (NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY)",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the server refused the client certificate: client_cert"
    " (NOMAD_CLIENT_CERT)",
    "TLSV1_ALERT_UNKNOWN_CA": "the server does not trust the client certificate's CA",
    "WRONG_VERSION_NUMBER": "is the server speaking plain HTTP? then use http://",
}


def tls_problem(exc: BaseException) -> str | None:
    """``TLS: <what OpenSSL said>`` (plus a hint) when ``exc`` or a cause is a TLS error."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ssl.SSLError):
            break
        cur = cur.__cause__ or cur.__context__
    if not isinstance(cur, ssl.SSLError):
        return None
    if isinstance(cur, ssl.SSLCertVerificationError) and cur.verify_message:
        text = f"certificate verify failed: {cur.verify_message}"
        hint = (
            "set tls_server_name (NOMAD_TLS_SERVER_NAME) to a name in the server's certificate"
            if "mismatch" in cur.verify_message
            else "check ca_cert / ca_path (NOMAD_CACERT, NOMAD_CAPATH)"
        )
    else:
        raw = str(cur.args[1]) if len(cur.args) > 1 else str(cur)
        text = _SSL_TAG.sub("", raw).strip() or type(cur).__name__
        hint = _TLS_HINTS.get(str(getattr(cur, "reason", "") or ""), "")
    return f"TLS: {text.rstrip('.')}" + (f" ({hint})" if hint else "")


def _address(exc: httpx.HTTPError) -> str:
    try:
        url = exc.request.url
    except RuntimeError:  # no request attached (constructed by hand)
        return ""
    return f"{url.scheme}://{url.netloc.decode()}"


def error_for_transport(exc: BaseException, *, what: str, address: str = "") -> BackendError:
    """A connection-level failure (refused, reset, timeout, TLS) → ``BackendUnavailable``.

    Names the address tried — the TOML address beats NOMAD_ADDR (docs/design/metrics.md) —
    from the request, else ``address``."""
    where = (_address(exc) if isinstance(exc, httpx.HTTPError) else "") or address
    tls = tls_problem(exc)
    if tls is not None:
        return BackendUnavailable(f"nomad {where or 'address'}: {tls}")
    kind = type(exc).__name__
    detail = str(exc)
    if not detail:  # e.g. ReadError('') over ConnectionResetError: say what the cause said
        cause = exc.__cause__ or exc.__context__
        while cause is not None and not str(cause):
            cause = cause.__cause__ or cause.__context__
        detail = str(cause) if cause is not None else kind
    return BackendUnavailable(
        f"nomad{' at ' + where if where else ''} {what}: {kind}: {_short(detail)}"
    )
